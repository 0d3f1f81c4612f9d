// Package signing signs the commits the worker writes, so that Flux (or any
// reader of the branch) can check where a commit came from. One key file
// holds either an armored OpenPGP private key or an OpenSSH private key; the
// format is read from the file. SSH signatures are the SSHSIG blobs that git
// writes with gpg.format=ssh (namespace "git", SHA-512).
package signing

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Format names a kind of signature.
type Format string

const (
	OpenPGP Format = "openpgp"
	SSH     Format = "ssh"
)

// Signer signs the encoded form of a commit (without its signature header)
// and returns the armored signature git stores in the commit's gpgsig
// header.
type Signer interface {
	Sign(payload []byte) ([]byte, error)
	Format() Format
	// Fingerprint identifies the key: the OpenPGP fingerprint in hex, or
	// the SSH key's SHA256 fingerprint as ssh-keygen prints it.
	Fingerprint() string
}

// Load reads the private key in keyFile and, if the key is encrypted, the
// passphrase in passphraseFile (trailing line breaks are not part of it).
// onSecret, if set, hears the passphrase so that outputs can blank it.
func Load(keyFile, passphraseFile string, onSecret func(string)) (Signer, error) {
	key, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("read signing key: %w", err)
	}
	var pass []byte
	if passphraseFile != "" {
		b, err := os.ReadFile(passphraseFile)
		if err != nil {
			return nil, fmt.Errorf("read signing key passphrase: %w", err)
		}
		pass = bytes.TrimRight(b, "\r\n")
		if len(pass) > 0 && onSecret != nil {
			onSecret(string(pass))
		}
	}
	return Parse(key, pass)
}

// Parse is Load on the key's bytes and the passphrase itself.
func Parse(key, passphrase []byte) (Signer, error) {
	text := bytes.TrimSpace(key)
	switch {
	case bytes.HasPrefix(text, []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----")):
		return parseOpenPGP(text, passphrase)
	case bytes.HasPrefix(text, []byte("-----BEGIN PGP PUBLIC KEY BLOCK-----")),
		bytes.HasPrefix(text, []byte("ssh-")), bytes.HasPrefix(text, []byte("ecdsa-")):
		return nil, errors.New("signing key: the file holds a public key; it must hold the private key")
	case bytes.HasPrefix(text, []byte("-----BEGIN ")):
		return parseSSH(text, passphrase)
	default:
		return nil, errors.New("signing key: neither an armored OpenPGP private key nor an OpenSSH private key")
	}
}

type pgpSigner struct {
	entity      *openpgp.Entity
	fingerprint string
}

func parseOpenPGP(key, passphrase []byte) (Signer, error) {
	const end = "-----END PGP PRIVATE KEY BLOCK-----"
	if i := bytes.Index(key, []byte(end)); i >= 0 && len(bytes.TrimSpace(key[i+len(end):])) > 0 {
		return nil, errors.New("signing key: the file holds more than one OpenPGP armor block; it must hold one key")
	}
	block, err := armor.Decode(bytes.NewReader(key))
	if err != nil {
		return nil, fmt.Errorf("signing key: read OpenPGP armor: %w", err)
	}
	entities, err := openpgp.ReadKeyRing(block.Body)
	if err != nil {
		return nil, fmt.Errorf("signing key: read OpenPGP key: %w", err)
	}
	if len(entities) != 1 {
		return nil, fmt.Errorf("signing key: the file holds %d OpenPGP keys; it must hold one", len(entities))
	}
	e := entities[0]
	if e.PrivateKey == nil {
		return nil, errors.New("signing key: the OpenPGP key has no private part")
	}
	if encrypted(e) {
		if len(passphrase) == 0 {
			return nil, errors.New("signing key: the OpenPGP key is encrypted; set GIT_SIGNING_PASSPHRASE_FILE")
		}
		if err := e.DecryptPrivateKeys(passphrase); err != nil {
			return nil, fmt.Errorf("signing key: decrypt the OpenPGP key (wrong passphrase?): %w", err)
		}
	}
	s := &pgpSigner{entity: e, fingerprint: strings.ToUpper(fmt.Sprintf("%x", e.PrimaryKey.Fingerprint))}
	// Sign once now, so that a key that cannot sign is refused at start
	// rather than at the first message.
	if _, err := s.Sign([]byte("tenant-worker signing check")); err != nil {
		return nil, fmt.Errorf("signing key: the OpenPGP key cannot sign: %w", err)
	}
	return s, nil
}

func encrypted(e *openpgp.Entity) bool {
	if e.PrivateKey != nil && e.PrivateKey.Encrypted {
		return true
	}
	for _, sub := range e.Subkeys {
		if sub.PrivateKey != nil && sub.PrivateKey.Encrypted {
			return true
		}
	}
	return false
}

func (s *pgpSigner) Sign(payload []byte) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.entity, bytes.NewReader(payload), nil); err != nil {
		return nil, fmt.Errorf("sign with OpenPGP key %s: %w", s.fingerprint, err)
	}
	return b.Bytes(), nil
}

func (s *pgpSigner) Format() Format      { return OpenPGP }
func (s *pgpSigner) Fingerprint() string { return s.fingerprint }

type sshSigner struct {
	key ssh.Signer
}

func parseSSH(key, passphrase []byte) (Signer, error) {
	k, err := ssh.ParsePrivateKey(key)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		if len(passphrase) == 0 {
			return nil, errors.New("signing key: the SSH key is encrypted; set GIT_SIGNING_PASSPHRASE_FILE")
		}
		k, err = ssh.ParsePrivateKeyWithPassphrase(key, passphrase)
		if err != nil {
			return nil, fmt.Errorf("signing key: decrypt the SSH key (wrong passphrase?): %w", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("signing key: read SSH key: %w", err)
	}
	switch t := k.PublicKey().Type(); t {
	case ssh.KeyAlgoED25519, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521, ssh.KeyAlgoRSA:
	default:
		return nil, fmt.Errorf("signing key: SSH keys of type %s cannot sign commits that git verifies", t)
	}
	s := &sshSigner{key: k}
	if _, err := s.Sign([]byte("tenant-worker signing check")); err != nil {
		return nil, fmt.Errorf("signing key: the SSH key cannot sign: %w", err)
	}
	return s, nil
}

func (s *sshSigner) Sign(payload []byte) ([]byte, error) {
	sig, err := sshsig.Sign(bytes.NewReader(payload), s.key, sshsig.HashSHA512, "git")
	if err != nil {
		return nil, fmt.Errorf("sign with SSH key %s: %w", s.Fingerprint(), err)
	}
	return sshsig.Armor(sig), nil
}

func (s *sshSigner) Format() Format      { return SSH }
func (s *sshSigner) Fingerprint() string { return ssh.FingerprintSHA256(s.key.PublicKey()) }

// PublicKey returns the public half of s in the form its verifiers take:
// an armored OpenPGP public key, or an authorized_keys line.
func PublicKey(s Signer) ([]byte, error) {
	switch s := s.(type) {
	case *pgpSigner:
		var b bytes.Buffer
		w, err := armor.Encode(&b, openpgp.PublicKeyType, nil)
		if err != nil {
			return nil, err
		}
		if err := s.entity.Serialize(w); err != nil {
			return nil, fmt.Errorf("export OpenPGP public key: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	case *sshSigner:
		return ssh.MarshalAuthorizedKey(s.key.PublicKey()), nil
	default:
		return nil, fmt.Errorf("unknown signer %T", s)
	}
}
