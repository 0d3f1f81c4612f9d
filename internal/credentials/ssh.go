package credentials

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/skeema/knownhosts"
	"golang.org/x/crypto/ssh"
)

// ErrHostKey: the SSH server's host key is not pinned in the known_hosts
// file (unknown, or changed). There is no mode that accepts it anyway.
var ErrHostKey = errors.New("SSH host key not pinned")

// SSHKey is an OpenSSH private key (a deploy key), with the server's host
// keys pinned by a known_hosts file. The key, its passphrase and the
// known_hosts file are read again when they change or after a refusal.
type SSHKey struct {
	user, hostport                string
	keyFile, passFile, knownHosts string
	onSecret                      func(string)
	mu                            sync.Mutex
	auth                          *gitssh.PublicKeys
	stamp                         []fileStamp
	stale                         bool
}

type fileStamp struct {
	size  int64
	mtime time.Time
}

// SSHKeyFile is the key in keyFile for user (the user of the SSH URL, such
// as git) at hostport (the server, host:port), its passphrase in
// passphraseFile (optional) and the host keys in knownHostsFile. All are
// read now: a key that does not load is an error. onSecret hears the
// passphrase.
func SSHKeyFile(user, hostport, keyFile, passphraseFile, knownHostsFile string, onSecret func(string)) (*SSHKey, error) {
	k := &SSHKey{user: defaultUser(user), hostport: hostport, keyFile: keyFile, passFile: passphraseFile, knownHosts: knownHostsFile,
		onSecret: onSecret, stale: true}
	if _, err := k.current(); err != nil {
		return nil, err
	}
	return k, nil
}

// Auth implements Provider.
func (k *SSHKey) Auth() (transport.AuthMethod, error) { return k.current() }

// Refused implements Provider.
func (k *SSHKey) Refused() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stale = true
}

// Fingerprint is the SHA256 fingerprint of the key, as ssh-keygen -l shows it.
func (k *SSHKey) Fingerprint() string {
	a, err := k.current()
	if err != nil {
		return ""
	}
	return ssh.FingerprintSHA256(a.Signer.PublicKey())
}

func (k *SSHKey) stamps() ([]fileStamp, error) {
	var out []fileStamp
	for _, f := range []string{k.keyFile, k.passFile, k.knownHosts} {
		if f == "" {
			out = append(out, fileStamp{})
			continue
		}
		info, err := os.Stat(f)
		if err != nil {
			return nil, err
		}
		out = append(out, fileStamp{info.Size(), info.ModTime()})
	}
	return out, nil
}

func (k *SSHKey) current() (*gitssh.PublicKeys, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	stamp, err := k.stamps()
	if err != nil {
		return nil, fmt.Errorf("SSH credentials: %w", err)
	}
	if !k.stale && k.auth != nil && equalStamps(stamp, k.stamp) {
		return k.auth, nil
	}
	pem, err := os.ReadFile(k.keyFile)
	if err != nil {
		return nil, fmt.Errorf("read GIT_SSH_KEY_FILE: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	var missing *ssh.PassphraseMissingError
	if errors.As(err, &missing) {
		if k.passFile == "" {
			return nil, errors.New("GIT_SSH_KEY_FILE is encrypted: set GIT_SSH_KEY_PASSPHRASE_FILE")
		}
		b, rerr := os.ReadFile(k.passFile)
		if rerr != nil {
			return nil, fmt.Errorf("read GIT_SSH_KEY_PASSPHRASE_FILE: %w", rerr)
		}
		pass := bytes.TrimRight(b, "\r\n")
		if k.onSecret != nil {
			k.onSecret(string(pass))
		}
		signer, err = ssh.ParsePrivateKeyWithPassphrase(pem, pass)
	}
	if err != nil {
		return nil, fmt.Errorf("GIT_SSH_KEY_FILE %s: not a usable OpenSSH private key (or a wrong passphrase): %w", k.keyFile, err)
	}
	db, err := knownhosts.NewDB(k.knownHosts)
	if err != nil {
		return nil, fmt.Errorf("GIT_KNOWN_HOSTS_FILE %s: %w", k.knownHosts, err)
	}
	auth := &gitssh.PublicKeys{User: k.user, Signer: signer}
	auth.HostKeyCallback = pinned(db)
	// Ask the server for a kind of host key the file holds for it.
	auth.HostKeyAlgorithms = db.HostKeyAlgorithms(k.hostport)
	k.auth, k.stamp, k.stale = auth, stamp, false
	return auth, nil
}

func equalStamps(a, b []fileStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].size != b[i].size || !a[i].mtime.Equal(b[i].mtime) {
			return false
		}
	}
	return true
}

// pinned checks the server's host key against the known_hosts file, and
// says plainly what is wrong when it is not there.
func pinned(db *knownhosts.HostKeyDB) ssh.HostKeyCallback {
	check := db.HostKeyCallback()
	return func(hostname string, remote net.Addr, key ssh.PublicKey) error {
		err := check(hostname, remote, key)
		if err == nil {
			return nil
		}
		if knownhosts.IsHostKeyChanged(err) {
			return fmt.Errorf("%w: the %s host key of %s (%s) has changed: it is not the key GIT_KNOWN_HOSTS_FILE pins for this host; refusing to connect",
				ErrHostKey, key.Type(), hostname, ssh.FingerprintSHA256(key))
		}
		return fmt.Errorf("%w: the %s host key of %s (%s) is unknown: GIT_KNOWN_HOSTS_FILE pins no key for this host; refusing to connect",
			ErrHostKey, key.Type(), hostname, ssh.FingerprintSHA256(key))
	}
}
