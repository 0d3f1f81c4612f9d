package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"

	"github.com/tenant-worker/tenant-worker/internal/message"
)

// requestFlags are the parts of a tenant message, as `send` and `plan`
// take them.
type requestFlags struct {
	tenantID, tier, release, body string
}

func (r *requestFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&r.tenantID, "tenant-id", "", "tenant id (a DNS label of at most 44 characters)")
	fs.StringVar(&r.tier, "tier", "", "tier: premium, advanced, basic (or silo, hybrid, pool) or any tier of the repository")
	fs.StringVar(&r.release, "release", "", "release version, MAJOR.MINOR (onboarding, deployment)")
	fs.StringVar(&r.body, "body", "", "the message body as JSON, instead of the three flags above")
}

// parseKind parses a command's flags and its one argument, the kind of
// message; done is true when the command must return code.
func parseKind(fs *flag.FlagSet, args []string, stderr io.Writer) (kind message.Kind, code int, done bool) {
	if code, done := parse(fs, args); done {
		return "", code, true
	}
	kind, err := kindArg(fs)
	if err != nil {
		fmt.Fprintf(stderr, "tenant-worker %s: %v\n", fs.Name(), err)
		return "", 2, true
	}
	return kind, 0, false
}

// kindArg reads the kind, the first argument.
func kindArg(fs *flag.FlagSet) (message.Kind, error) {
	if fs.NArg() != 1 {
		return "", fmt.Errorf("want one of onboarding, offboarding, deployment; got %q", fs.Args())
	}
	k := message.Kind(fs.Arg(0))
	if !slices.Contains(message.Kinds, k) {
		return "", fmt.Errorf("unknown kind %q: want onboarding, offboarding or deployment", fs.Arg(0))
	}
	return k, nil
}

// message builds the body the reference's scripts send, and checks it the
// way the worker will.
func (r *requestFlags) message(kind message.Kind) (string, message.Request, error) {
	body := r.body
	if body == "" {
		if r.tenantID == "" && r.tier == "" && r.release == "" {
			return "", message.Request{}, fmt.Errorf("give --tenant-id, --tier and --release (or --body)")
		}
		m := map[string]string{}
		for k, v := range map[string]string{"tenant_id": r.tenantID, "tenant_tier": r.tier, "release_version": r.release} {
			if v != "" {
				m[k] = v
			}
		}
		b, err := json.Marshal(m)
		if err != nil {
			return "", message.Request{}, err
		}
		body = string(b)
	} else if r.tenantID != "" || r.tier != "" || r.release != "" {
		return "", message.Request{}, fmt.Errorf("--body replaces --tenant-id, --tier and --release; give one or the other")
	}
	req, err := message.Decode(kind, []byte(body))
	if err != nil {
		return body, req, err
	}
	return body, req, nil
}
