package message

import (
	"strings"
	"testing"

	"github.com/tenant-worker/tenant-worker/internal/redact"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		kind Kind
		body string
		want Request
	}{
		{Onboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`,
			Request{Kind: Onboarding, TenantID: "tenant-1", Tier: "premium", ReleaseVersion: "0.0"}},
		{Onboarding, `{"tenant_id":"t2","tenant_tier":"hybrid","release_version":"12.3"}`,
			Request{Kind: Onboarding, TenantID: "t2", Tier: "advanced", ReleaseVersion: "12.3"}},
		{Offboarding, `{"tenant_id":"tenant-1","tenant_tier":"silo"}`,
			Request{Kind: Offboarding, TenantID: "tenant-1", Tier: "premium"}},
		{Offboarding, `{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"whatever"}`,
			Request{Kind: Offboarding, TenantID: "tenant-1", Tier: "premium"}},
		{Deployment, `{"tenant_tier":"pool","release_version":"1.0"}`,
			Request{Kind: Deployment, Tier: "basic", ReleaseVersion: "1.0"}},
		{Deployment, ` {"tenant_tier":"basic","release_version":"1.0","tenant_id":"a"} `,
			Request{Kind: Deployment, TenantID: "a", Tier: "basic", ReleaseVersion: "1.0"}},
		// Strings in YAML 1.2, as Flux reads the files (booleans in 1.1).
		{Onboarding, `{"tenant_id":"yes","tenant_tier":"basic","release_version":"0.0"}`,
			Request{Kind: Onboarding, TenantID: "yes", Tier: "basic", ReleaseVersion: "0.0"}},
		{Onboarding, `{"tenant_id":"123a","tenant_tier":"basic","release_version":"0.0"}`,
			Request{Kind: Onboarding, TenantID: "123a", Tier: "basic", ReleaseVersion: "0.0"}},
		{Onboarding, `{"tenant_id":"` + strings.Repeat("a", 44) + `","tenant_tier":"basic","release_version":"0.0"}`,
			Request{Kind: Onboarding, TenantID: strings.Repeat("a", 44), Tier: "basic", ReleaseVersion: "0.0"}},
	}
	for _, tt := range tests {
		got, err := Decode(tt.kind, []byte(tt.body))
		if err != nil {
			t.Errorf("Decode(%s, %s): %v", tt.kind, tt.body, err)
			continue
		}
		if got != tt.want {
			t.Errorf("Decode(%s, %s) = %+v, want %+v", tt.kind, tt.body, got, tt.want)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	on := func(id, tier, ver string) string {
		return `{"tenant_id":"` + id + `","tenant_tier":"` + tier + `","release_version":"` + ver + `"}`
	}
	tests := []struct {
		name   string
		kind   Kind
		body   string
		reason reject.Reason
	}{
		{"not json", Onboarding, `tenant-1`, reject.InvalidJSON},
		{"empty", Onboarding, ``, reject.InvalidJSON},
		{"array", Onboarding, `["tenant-1"]`, reject.InvalidJSON},
		{"truncated", Onboarding, `{"tenant_id":"a"`, reject.InvalidJSON},
		{"trailing", Onboarding, on("a", "basic", "1.0") + `{}`, reject.InvalidJSON},
		{"duplicate key", Onboarding, `{"tenant_id":"a","tenant_id":"b","tenant_tier":"basic","release_version":"1.0"}`, reject.InvalidJSON},
		{"missing id", Onboarding, `{"tenant_tier":"basic","release_version":"1.0"}`, reject.MissingField},
		{"missing tier", Offboarding, `{"tenant_id":"a"}`, reject.MissingField},
		{"missing version", Deployment, `{"tenant_tier":"basic"}`, reject.MissingField},
		{"number", Onboarding, `{"tenant_id":1,"tenant_tier":"basic","release_version":"1.0"}`, reject.InvalidField},
		{"null", Onboarding, `{"tenant_id":null,"tenant_tier":"basic","release_version":"1.0"}`, reject.InvalidField},
		{"version number", Onboarding, `{"tenant_id":"a","tenant_tier":"basic","release_version":1.0}`, reject.InvalidField},
		{"object", Onboarding, `{"tenant_id":{},"tenant_tier":"basic","release_version":"1.0"}`, reject.InvalidField},
		{"unknown key", Onboarding, `{"tenant_id":"a","tenant_tier":"basic","release_version":"1.0","x":"y"}`, reject.InvalidField},
		{"traversal", Onboarding, on("../x", "basic", "1.0"), reject.InvalidTenantID},
		{"upper case", Onboarding, on("Tenant_1", "basic", "1.0"), reject.InvalidTenantID},
		{"absolute", Onboarding, on("/etc/passwd", "basic", "1.0"), reject.InvalidTenantID},
		{"newline", Onboarding, on(`a\nb`, "basic", "1.0"), reject.InvalidTenantID},
		{"yaml injection", Onboarding, on(`a\n  evil: true`, "basic", "1.0"), reject.InvalidTenantID},
		{"look-alike", Onboarding, on("tenаnt", "basic", "1.0"), reject.InvalidTenantID},
		{"leading dash", Onboarding, on("-a", "basic", "1.0"), reject.InvalidTenantID},
		{"60 chars", Onboarding, on(strings.Repeat("a", 60), "basic", "1.0"), reject.InvalidTenantID},
		{"45 chars", Onboarding, on(strings.Repeat("a", 45), "basic", "1.0"), reject.InvalidTenantID},
		{"empty id", Onboarding, on("", "basic", "1.0"), reject.InvalidTenantID},
		{"an integer in YAML", Onboarding, on("123", "basic", "1.0"), reject.InvalidTenantID},
		{"a float in YAML", Onboarding, on("1e3", "basic", "1.0"), reject.InvalidTenantID},
		{"a hex integer in YAML", Onboarding, on("0x1f", "basic", "1.0"), reject.InvalidTenantID},
		{"an octal integer in YAML", Onboarding, on("0o17", "basic", "1.0"), reject.InvalidTenantID},
		{"a boolean in YAML", Onboarding, on("true", "basic", "1.0"), reject.InvalidTenantID},
		{"null in YAML", Offboarding, `{"tenant_id":"null","tenant_tier":"basic"}`, reject.InvalidTenantID},
		{"reserved", Onboarding, on("kustomization", "basic", "1.0"), reject.ReservedTenant},
		{"reserved dummy", Offboarding, `{"tenant_id":"dummy-configmap","tenant_tier":"basic"}`, reject.ReservedTenant},
		{"empty tier", Onboarding, on("a", "", "1.0"), reject.UnknownTier},
		{"tier path", Onboarding, on("a", "../premium", "1.0"), reject.UnknownTier},
		{"tier case", Onboarding, on("a", "Premium", "1.0"), reject.UnknownTier},
		{"version 1", Onboarding, on("a", "basic", "1"), reject.InvalidVersion},
		{"version v1.0", Onboarding, on("a", "basic", "v1.0"), reject.InvalidVersion},
		{"version 1.0.0", Deployment, `{"tenant_tier":"basic","release_version":"1.0.0"}`, reject.InvalidVersion},
		{"version sed", Deployment, `{"tenant_tier":"basic","release_version":"1.0|g"}`, reject.InvalidVersion},
		{"version leading zero", Onboarding, on("a", "basic", "01.0"), reject.InvalidVersion},
		{"huge", Onboarding, `{"tenant_id":"` + strings.Repeat("a", 256*1024) + `"}`, reject.TooLarge},
		{"bad utf8", Onboarding, "{\"tenant_id\":\"\xff\"}", reject.InvalidJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.kind, []byte(tt.body))
			r, ok := reject.As(err)
			if !ok {
				t.Fatalf("Decode(%q) = %v, want a rejection", tt.body, err)
			}
			if r.Reason != tt.reason {
				t.Fatalf("Decode(%q) reason %s (%v), want %s", tt.body, r.Reason, err, tt.reason)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error too long (%d bytes): echoes the input", len(err.Error()))
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"tenant_id":"tenant-1","tenant_tier":"premium","release_version":"0.0"}`))
	f.Add([]byte(`{"tenant_tier":"basic","release_version":"1.0"}`))
	f.Add([]byte(`{"tenant_id":"../x","tenant_tier":"basic","release_version":"1"}`))
	f.Add([]byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, kind := range Kinds {
			req, err := Decode(kind, body)
			if err != nil {
				if _, ok := reject.As(err); !ok {
					t.Fatalf("non-rejection error %v", err)
				}
				continue
			}
			if req.TenantID != "" && ValidateTenantID(req.TenantID) != nil {
				t.Fatalf("accepted invalid tenant id %q", req.TenantID)
			}
			if strings.ContainsAny(req.Tier+req.TenantID+req.ReleaseVersion, "/\\\n\r :{}") {
				t.Fatalf("accepted unsafe value %+v", req)
			}
		}
	})
}

func FuzzValidateTenantID(f *testing.F) {
	for _, s := range []string{"tenant-1", "a", "../x", "Tenant_1", "kustomization", strings.Repeat("a", 44),
		strings.Repeat("a", 45), "-a", "a-", "tenаnt", "a\nb", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := ValidateTenantID(id)
		if err == nil {
			// What passes must be safe as a file name, a Namespace and the
			// prefix of a Helm release name.
			if len(id) == 0 || len(id) > MaxTenantIDLength || id[0] == '-' || id[len(id)-1] == '-' || reservedIDs[id] {
				t.Fatalf("accepted %q", id)
			}
			for _, r := range id {
				if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
					t.Fatalf("accepted %q with %q", id, r)
				}
			}
			if len(id+"-advanced") > 53 {
				t.Fatalf("release name of %q too long", id)
			}
			return
		}
		if _, ok := reject.As(err); !ok {
			t.Fatalf("error for %q is not a rejection: %v", id, err)
		}
	})
}

// TestRejectionCutsNoSecret: a value quoted in a rejection is cut short;
// a secret the cut would split is blanked whole, not shown in part.
func TestRejectionCutsNoSecret(t *testing.T) {
	const secret = "tok-7f3a9c1e+never/print=me"
	redact.Add(secret)
	v := strings.Repeat("1.", 28) + secret
	err := ValidateVersion(v)
	if err == nil || strings.Contains(err.Error(), secret[:4]) || !strings.Contains(err.Error(), "[REDACT") {
		t.Errorf("ValidateVersion(%q): %v: shows part of the secret", v, err)
	}
}
