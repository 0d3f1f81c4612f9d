// Package message decodes and validates the SQS message bodies that drive the
// worker. The schemas are the reference platform's: flat JSON objects whose
// values are strings, as sent by `aws sqs send-message --message-body '{...}'`.
package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	kyaml "sigs.k8s.io/kustomize/kyaml/yaml"

	"github.com/tenant-worker/tenant-worker/internal/redact"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// Kind is the flow a message asks for; each queue carries one kind.
type Kind string

// The three flows of the reference platform.
const (
	Onboarding  Kind = "onboarding"
	Offboarding Kind = "offboarding"
	Deployment  Kind = "deployment"
)

// Kinds lists every kind in a stable order.
var Kinds = []Kind{Onboarding, Offboarding, Deployment}

// MaxBodyBytes bounds a message body. The largest valid body is well under
// 300 bytes; anything much bigger is refused before it is parsed.
const MaxBodyBytes = 4096

// MaxTenantIDLength keeps "<id>-<tier>" within Helm's 53-character release
// name limit for the longest reference tier name ("advanced", "premium").
const MaxTenantIDLength = 44

// Request is a validated message.
type Request struct {
	Kind Kind
	// TenantID is empty only for a deployment to a whole tier.
	TenantID string
	// Tier is the canonical tier name (aliases resolved), not yet checked
	// against the repository.
	Tier string
	// ReleaseVersion is MAJOR.MINOR; empty for offboarding.
	ReleaseVersion string
}

// tierAliases maps the names used in the platform's docs to tier folders.
var tierAliases = map[string]string{"silo": "premium", "hybrid": "advanced", "pool": "basic"}

var (
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	version  = regexp.MustCompile(`^(0|[1-9][0-9]{0,5})\.(0|[1-9][0-9]{0,5})$`)
)

// reservedIDs would collide with files every tier folder holds, or with
// the stand-in tenant the pipeline renders to tell a broken template from a
// bad message.
var reservedIDs = map[string]bool{"kustomization": true, "dummy-configmap": true, ProbeTenant: true}

// ProbeTenant is the stand-in tenant id (see reservedIDs).
const ProbeTenant = "tenant-worker-probe"

// schema says which keys a kind requires and which it may carry.
type schema struct {
	required []string
	optional []string
}

var schemas = map[Kind]schema{
	Onboarding:  {required: []string{"tenant_id", "tenant_tier", "release_version"}},
	Offboarding: {required: []string{"tenant_id", "tenant_tier"}, optional: []string{"release_version"}},
	Deployment:  {required: []string{"tenant_tier", "release_version"}, optional: []string{"tenant_id"}},
}

// Decode parses and validates body for kind. Every error it returns is a
// reject.Error: a body that fails here can never succeed.
func Decode(kind Kind, body []byte) (Request, error) {
	sc, ok := schemas[kind]
	if !ok {
		return Request{}, fmt.Errorf("unknown message kind %q", kind)
	}
	if len(body) > MaxBodyBytes {
		return Request{}, reject.Errorf(reject.TooLarge, "body is %d bytes, the limit is %d", len(body), MaxBodyBytes)
	}
	fields, err := decodeObject(body)
	if err != nil {
		return Request{}, err
	}
	allowed := map[string]bool{}
	for _, k := range append(append([]string{}, sc.required...), sc.optional...) {
		allowed[k] = true
	}
	for _, k := range sortedKeys(fields) {
		if !allowed[k] {
			return Request{}, reject.Errorf(reject.InvalidField, "unknown key %s for %s (allowed: %s)",
				quote(k), kind, strings.Join(sortedKeys(allowed), ", "))
		}
	}
	for _, k := range sc.required {
		if _, ok := fields[k]; !ok {
			return Request{}, reject.Errorf(reject.MissingField, "missing key %q", k)
		}
	}

	req := Request{Kind: kind}
	if req.Tier, err = ParseTier(fields["tenant_tier"]); err != nil {
		return Request{}, err
	}
	if id, ok := fields["tenant_id"]; ok {
		if err := ValidateTenantID(id); err != nil {
			return Request{}, err
		}
		req.TenantID = id
	}
	if kind != Offboarding {
		if err := ValidateVersion(fields["release_version"]); err != nil {
			return Request{}, err
		}
		req.ReleaseVersion = fields["release_version"]
	}
	return req, nil
}

// decodeObject reads a JSON object of string values, refusing duplicate keys
// and trailing data, which encoding/json would silently accept.
func decodeObject(body []byte) (map[string]string, error) {
	if !utf8.Valid(body) {
		return nil, reject.Errorf(reject.InvalidJSON, "body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, reject.Errorf(reject.InvalidJSON, "body is not JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, reject.Errorf(reject.InvalidJSON, "body is not a JSON object")
	}
	fields := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, reject.Errorf(reject.InvalidJSON, "body is not JSON: %v", err)
		}
		key, _ := tok.(string)
		if _, dup := fields[key]; dup {
			return nil, reject.Errorf(reject.InvalidJSON, "duplicate key %s", quote(key))
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, reject.Errorf(reject.InvalidJSON, "body is not JSON: %v", err)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			return nil, reject.Errorf(reject.InvalidField, "key %s must be a string, got %s", quote(key), describe(raw))
		}
		fields[key] = s
	}
	if _, err := dec.Token(); err != nil {
		return nil, reject.Errorf(reject.InvalidJSON, "body is not JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, reject.Errorf(reject.InvalidJSON, "trailing data after the JSON object")
	}
	return fields, nil
}

// describe names the JSON type of raw for an error message without echoing
// the (possibly huge or hostile) value itself.
func describe(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "nothing"
	}
	switch t[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// ParseTier resolves aliases and checks that tier can name a folder. Whether
// the tier exists is a property of the repository, checked later.
func ParseTier(tier string) (string, error) {
	if canonical, ok := tierAliases[tier]; ok {
		return canonical, nil
	}
	if tier == "" {
		return "", reject.Errorf(reject.UnknownTier, "tenant_tier is empty")
	}
	if len(tier) > 63 || !dnsLabel.MatchString(tier) {
		return "", reject.Errorf(reject.UnknownTier, "tenant_tier %s is not a tier name", quote(tier))
	}
	return tier, nil
}

// ValidateTenantID checks that id is usable as a Namespace, a file name and a
// Helm release name prefix.
func ValidateTenantID(id string) error {
	switch {
	case id == "":
		return reject.Errorf(reject.InvalidTenantID, "tenant_id is empty")
	case len(id) > MaxTenantIDLength:
		return reject.Errorf(reject.InvalidTenantID, "tenant_id is %d characters, the limit is %d", len(id), MaxTenantIDLength)
	case !dnsLabel.MatchString(id):
		return reject.Errorf(reject.InvalidTenantID,
			"tenant_id %s must be lower-case letters, digits and '-', starting and ending with a letter or digit", quote(id))
	case !yamlString(id):
		// The templates write the id unquoted: a number or a boolean in
		// YAML would name nothing (name: 123 is not a string to Flux), and
		// the whole folder would fail to apply.
		return reject.Errorf(reject.InvalidTenantID, "tenant_id %q reads as a number, a boolean or null in YAML; use a name with a letter that does not", id)
	case reservedIDs[id]:
		return reject.Errorf(reject.ReservedTenant, "tenant_id %q is reserved", id)
	case id == "default" || id == "flux-system" || strings.HasPrefix(id, "kube-"):
		// The namespaces every cluster has, and Flux's own: a tenant's
		// Namespace there would be Flux's to prune at offboarding.
		return reject.Errorf(reject.ReservedTenant, "tenant_id %q is a namespace the cluster itself uses", id)
	}
	return nil
}

// yamlString reports whether s, written unquoted as a YAML value, is read
// as a string by kustomize and Flux (YAML 1.2).
func yamlString(s string) bool {
	n, err := kyaml.Parse("v: " + s)
	if err != nil {
		return false
	}
	v := n.Field("v")
	return v != nil && v.Value.YNode().ShortTag() == kyaml.NodeTagString
}

// ValidateVersion checks release_version is MAJOR.MINOR.
func ValidateVersion(v string) error {
	if !version.MatchString(v) {
		return reject.Errorf(reject.InvalidVersion, "release_version %s must be MAJOR.MINOR, such as 1.0", quote(v))
	}
	return nil
}

// quote prints a value for a log line: quoted, escaped and cut short, so a
// hostile value cannot forge log lines or flood them. Secrets are blanked
// before the cut, which would leave part of one unrecognised.
func quote(s string) string {
	const max = 64
	n := len(s)
	if s = redact.String(s); len(s) > max {
		return fmt.Sprintf("%q... (%d bytes)", s[:max], n)
	}
	return fmt.Sprintf("%q", s)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
