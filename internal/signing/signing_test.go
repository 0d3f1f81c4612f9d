package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	fluxsig "github.com/fluxcd/pkg/git/signature"
	"golang.org/x/crypto/ssh"
)

// pgpKey returns an armored OpenPGP private key, encrypted when pass is set.
func pgpKey(t testing.TB, pass string) []byte {
	t.Helper()
	e, err := openpgp.NewEntity("tenant-worker", "", "worker@example.com", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	if pass != "" {
		if err := e.EncryptPrivateKeys([]byte(pass), nil); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	w, err := armor.Encode(&b, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SerializePrivateWithoutSigning(w, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sshKey returns an OpenSSH private key, encrypted when pass is set.
func sshKey(t testing.TB, pass string) []byte {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var block *pem.Block
	if pass != "" {
		block, err = ssh.MarshalPrivateKeyWithPassphrase(priv, "worker", []byte(pass))
	} else {
		block, err = ssh.MarshalPrivateKey(priv, "worker")
	}
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(block)
}

// TestSignaturesVerifyWithFlux signs with each kind of key, plain and
// encrypted, and checks the signature with Flux's own verifiers (the code
// source-controller runs for spec.verify).
func TestSignaturesVerifyWithFlux(t *testing.T) {
	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@b> 1 +0000\ncommitter a <a@b> 1 +0000\n\nmsg\n")
	for _, c := range []struct {
		name   string
		key    func(testing.TB, string) []byte
		pass   string
		format Format
	}{
		{"openpgp", pgpKey, "", OpenPGP},
		{"openpgp encrypted", pgpKey, "correct horse", OpenPGP},
		{"ssh", sshKey, "", SSH},
		{"ssh encrypted", sshKey, "correct horse", SSH},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			keyFile, passFile := filepath.Join(dir, "key"), ""
			if err := os.WriteFile(keyFile, c.key(t, c.pass), 0o600); err != nil {
				t.Fatal(err)
			}
			var heard []string
			if c.pass != "" {
				passFile = filepath.Join(dir, "pass")
				if err := os.WriteFile(passFile, []byte(c.pass+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if _, err := Load(keyFile, "", nil); err == nil || !strings.Contains(err.Error(), "GIT_SIGNING_PASSPHRASE_FILE") {
					t.Errorf("encrypted key without passphrase: %v", err)
				}
				wrong := filepath.Join(dir, "wrong")
				_ = os.WriteFile(wrong, []byte("wrong"), 0o600)
				if _, err := Load(keyFile, wrong, nil); err == nil {
					t.Error("wrong passphrase accepted")
				}
			}
			s, err := Load(keyFile, passFile, func(p string) { heard = append(heard, p) })
			if err != nil {
				t.Fatal(err)
			}
			if c.pass != "" && (len(heard) != 1 || heard[0] != c.pass) {
				t.Errorf("the passphrase was not handed over for redaction: %q", heard)
			}
			if s.Format() != c.format || s.Fingerprint() == "" {
				t.Errorf("format %s fingerprint %q", s.Format(), s.Fingerprint())
			}
			sig, err := s.Sign(payload)
			if err != nil {
				t.Fatal(err)
			}
			pub, err := PublicKey(s)
			if err != nil {
				t.Fatal(err)
			}
			var id string
			if c.format == OpenPGP {
				id, err = fluxsig.VerifyPGPSignature(string(sig), payload, string(pub))
			} else {
				id, err = fluxsig.VerifySSHSignature(string(sig), payload, string(pub))
			}
			if err != nil {
				t.Fatalf("Flux refuses the signature: %v", err)
			}
			if c.format == SSH && id != s.Fingerprint() {
				t.Errorf("Flux verified with %s, the key is %s", id, s.Fingerprint())
			}
			if c.format == OpenPGP && !strings.HasSuffix(s.Fingerprint(), id) {
				t.Errorf("Flux verified with key id %s, the key is %s", id, s.Fingerprint())
			}
			// A changed payload must not verify: the verifier is really checking.
			tampered := append(bytes.Clone(payload), 'x')
			if c.format == OpenPGP {
				_, err = fluxsig.VerifyPGPSignature(string(sig), tampered, string(pub))
			} else {
				_, err = fluxsig.VerifySSHSignature(string(sig), tampered, string(pub))
			}
			if err == nil {
				t.Error("Flux verified a signature over other bytes")
			}
		})
	}
}

// TestLoadRefusesWhatCannotSign: every key file that cannot sign is refused
// with a reason, and no error text carries key material.
func TestLoadRefusesWhatCannotSign(t *testing.T) {
	key := sshKey(t, "")
	s, err := Parse(key, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := PublicKey(s)
	pgp := pgpKey(t, "")
	pgpSigner, err := Parse(pgp, nil)
	if err != nil {
		t.Fatal(err)
	}
	pgpPub, _ := PublicKey(pgpSigner)
	for name, body := range map[string][]byte{
		"empty":                nil,
		"text":                 []byte("hello"),
		"ssh public key":       pub,
		"openpgp public key":   pgpPub,
		"truncated ssh key":    key[:len(key)/2],
		"truncated pgp key":    pgp[:len(pgp)/2],
		"two openpgp keys":     append(append([]byte{}, pgp...), pgp...),
		"garbage in pem":       []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"),
		"garbage in pgp armor": []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nAAAA\n-----END PGP PRIVATE KEY BLOCK-----\n"),
	} {
		_, err := Parse(body, nil)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "signing key") {
			t.Errorf("%s: error without context: %v", name, err)
		}
		if len(body) > 40 && strings.Contains(msg, string(body[40:60])) {
			t.Errorf("%s: error carries key material: %v", name, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing"), "", nil); err == nil {
		t.Error("a missing key file was accepted")
	}
}

// BenchmarkSign is the cost signing adds to each commit, by key kind (make
// bench prints it beside the worker's latency with and without signing).
func BenchmarkSign(b *testing.B) {
	payload := bytes.Repeat([]byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n"), 6)
	rsaPGP, err := openpgp.NewEntity("w", "", "w@example.com", &packet.Config{Algorithm: packet.PubKeyAlgoRSA, RSABits: 3072})
	if err != nil {
		b.Fatal(err)
	}
	var rsaArmor bytes.Buffer
	w, _ := armor.Encode(&rsaArmor, openpgp.PrivateKeyType, nil)
	if err := rsaPGP.SerializePrivate(w, nil); err != nil {
		b.Fatal(err)
	}
	w.Close()
	for _, c := range []struct {
		name string
		key  []byte
	}{
		{"ssh-ed25519", sshKey(b, "")},
		{"openpgp-ed25519", pgpKey(b, "")},
		{"openpgp-rsa3072", rsaArmor.Bytes()},
	} {
		s, err := Parse(c.key, nil)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Sign(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
