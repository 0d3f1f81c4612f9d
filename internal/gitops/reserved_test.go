package gitops

import (
	"math/rand/v2"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
)

// platform adds to the reference tree objects a platform declares outside
// the tier folders, in single- and multi-document files.
func platform(t *testing.T) fstest.MapFS {
	m := seed(t)
	m["clusters/production/infrastructure/karpenter.yaml"] = &fstest.MapFile{Data: []byte(
		"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: karpenter\n---\n" +
			"apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: karpenter\n  namespace: karpenter\n")}
	m["clusters/production/billing.yaml"] = &fstest.MapFile{Data: []byte(
		"# the platform's own\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: billing\n")}
	m["infrastructure/production/metrics.yml"] = &fstest.MapFile{Data: []byte(
		"---\napiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: t9-premium\n  namespace: flux-system\n")}
	return m
}

func TestReservedNames(t *testing.T) {
	for _, tc := range []struct {
		id, tier string
		want     reject.Reason // "" applies
	}{
		{"flux-system", "premium", reject.ReservedTenant},
		{"kube-system", "premium", reject.ReservedTenant},
		{"kube-anything", "basic", reject.ReservedTenant},
		{"default", "advanced", reject.ReservedTenant},
		{"pool-1", "premium", reject.ReservedTenant},   // a pooled environment
		{"karpenter", "premium", reject.NameCollision}, // a Namespace of the infrastructure
		{"billing", "advanced", reject.NameCollision},  // a Namespace added to clusters/
		{"t9", "premium", reject.NameCollision},        // a HelmRelease of the infrastructure
		{"t9", "basic", ""},                            // t9-basic is free
		{"t1", "premium", ""},
	} {
		body := `{"tenant_id":"` + tc.id + `","tenant_tier":"` + tc.tier + `","release_version":"0.0"}`
		req, err := message.Decode(message.Onboarding, []byte(body))
		if err == nil {
			_, err = layout.Plan(FS{platform(t)}, req)
		}
		r, rejected := reject.As(err)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s in %s: %v, want it applied", tc.id, tc.tier, err)
		case tc.want != "" && (!rejected || r.Reason != tc.want):
			t.Errorf("%s in %s: %v, want %s", tc.id, tc.tier, err, tc.want)
		}
	}
}

// TestAcceptedTenantsCollideWithNothing: any tenant id the worker accepts
// renders objects that nothing outside the tier folders declares.
func TestAcceptedTenantsCollideWithNothing(t *testing.T) {
	m := platform(t)
	declared, err := layout.declared(FS{m}, []string{"advanced", "basic", "premium"})
	if err != nil {
		t.Fatal(err)
	}
	namespaces := map[string]bool{}
	for o := range declared {
		namespaces[o.namespace] = true
	}
	r := rand.New(rand.NewPCG(11, 12))
	alphabet := "abcdefghijklmnopqrstuvwxyz0123456789-"
	names := []string{"karpenter", "billing", "t9", "flux-system", "kube-proxy", "default", "pool-1"}
	accepted := 0
	for i := 0; i < 400; i++ {
		id := names[r.IntN(len(names))]
		if r.IntN(2) == 0 {
			var b strings.Builder
			for n := 1 + r.IntN(12); n > 0; n-- {
				b.WriteByte(alphabet[r.IntN(len(alphabet))])
			}
			id = b.String()
		}
		tier := []string{"premium", "advanced", "basic"}[r.IntN(3)]
		req, err := message.Decode(message.Onboarding, []byte(`{"tenant_id":"`+id+`","tenant_tier":"`+tier+`","release_version":"0.0"}`))
		if err != nil {
			continue
		}
		c, err := layout.Plan(FS{m}, req)
		if err != nil {
			continue
		}
		accepted++
		for _, o := range objects(c.Files[layout.TenantFile(tier, id)]) {
			if file, ok := declared[o]; ok {
				t.Fatalf("accepted %s in %s, whose %s %s declares too", id, tier, o, file)
			}
			if o.kind == "Namespace" && namespaces[o.name] {
				t.Fatalf("accepted %s in %s, whose Namespace the platform uses", id, tier)
			}
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d of 400 random tenants accepted: the test checks too little", accepted)
	}
}
