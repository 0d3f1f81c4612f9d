package inventory

import (
	"testing"
	"testing/fstest"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/templates"
)

func TestRead(t *testing.T) {
	fsys, err := templates.MapFS()
	if err != nil {
		t.Fatal(err)
	}
	root := templates.Root
	fsys[root+"/tenants/premium/tenant-1.yaml"] = &fstest.MapFile{Data: []byte(`apiVersion: v1
kind: Namespace
metadata:
  name: tenant-1
---
apiVersion: helm.toolkit.fluxcd.io/v2beta1
kind: HelmRelease
metadata:
  name: tenant-1-premium
spec:
  chart:
    spec:
      chart: helm-tenant-chart
      version: "1.2.x"
  values:
    apps:
      producer:
        image:
          tag: "0.7" # {"$imagepolicy": "flux-system:producer-image-policy:tag"}
      consumer:
        image:
          tag: "0.3" # {"$imagepolicy": "flux-system:consumer-image-policy:tag"}
`)}
	k := fsys[root+"/tenants/premium/kustomization.yaml"]
	k.Data = append(append([]byte{}, k.Data...), "\n  - tenant-1.yaml\n  - ghost.yaml"...)
	inv, err := Read(gitops.FS{FS: fsys}, gitops.Layout{Root: root}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Tiers) != 3 {
		t.Errorf("tiers %v", inv.Tiers)
	}
	got := map[string]Tenant{}
	for _, tn := range inv.Tenants {
		got[tn.ID] = tn
	}
	if tn := got["tenant-1"]; tn.Tier != "premium" || tn.ChartVersion != "1.2.x" || !tn.File || !tn.Listed ||
		tn.Images["producer-image-policy"] != "0.7" || tn.Images["consumer-image-policy"] != "0.3" {
		t.Errorf("tenant-1 = %+v", tn)
	}
	if tn := got["ghost"]; tn.File || !tn.Listed {
		t.Errorf("an entry without a file: %+v", tn)
	}
	if tn := got["pool-1"]; !tn.Pool || !tn.File || tn.ChartVersion == "" || len(tn.Images) == 0 {
		t.Errorf("pooled env: %+v", tn)
	}
}
