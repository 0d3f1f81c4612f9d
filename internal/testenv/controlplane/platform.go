package controlplane

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/repo"
)

// platformFS holds copies of the platform's own pieces (from the shared
// fixtures): its tenant chart, the tofu-controller CRD the chart's
// Terraform object needs, and its dataplane Kustomizations as they are in
// clusters/production.
//
//go:embed platform
var platformFS embed.FS

// PlatformOptions say where the platform's Flux objects point.
type PlatformOptions struct {
	// RepoURL and Branch are the GitOps repository; Username and Password
	// its basic-auth credentials (a token), kept in Secret flux-system.
	RepoURL, Branch, Username, Password string
	// ChartVersions are the versions of the tenant chart the Helm
	// repository serves (default 0.0.1 and 1.0.1).
	ChartVersions []string
}

// Platform is what InstallPlatform set up.
type Platform struct {
	// ChartURL is the Helm repository helm-tenant-chart serves.
	ChartURL  string
	chartsDir string
	// Kustomizations are the names of the dataplane Kustomizations.
	Kustomizations []string
}

// InstallPlatform sets up the platform's Flux objects: the GitRepository
// flux-system with its Secret, the HelmRepository helm-tenant-chart served
// over HTTP on loopback until ctx ends (the tenant chart packaged at
// o.ChartVersions), the ConfigMap saas-infra-outputs, and the
// dataplane-tenants and dataplane-pooled-envs Kustomizations as the
// platform ships them. Charts are written under dir.
func (cp *ControlPlane) InstallPlatform(ctx context.Context, dir string, o PlatformOptions) (*Platform, error) {
	if len(o.ChartVersions) == 0 {
		o.ChartVersions = []string{"0.0.1", "1.0.1"}
	}
	if o.Branch == "" {
		o.Branch = "main"
	}
	charts := filepath.Join(dir, "charts")
	if err := os.MkdirAll(charts, 0o755); err != nil {
		return nil, err
	}
	url, err := ServeDir(ctx, charts)
	if err != nil {
		return nil, err
	}
	if err := PackageChart(filepath.Join(dir, "chart-src"), charts, url, o.ChartVersions); err != nil {
		return nil, err
	}
	objects := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: flux-system, namespace: %[1]s}
stringData: {username: %[2]q, password: %[3]q}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: flux-system, namespace: %[1]s}
spec:
  interval: 1m0s
  url: %[4]q
  ref: {branch: %[5]q}
  secretRef: {name: flux-system}
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: helm-tenant-chart, namespace: %[1]s}
spec:
  interval: 1m0s
  url: %[6]q
---
apiVersion: v1
kind: ConfigMap
metadata: {name: saas-infra-outputs, namespace: %[1]s}
data:
  aws_region: us-west-2
  account_id: "123456789012"
  ECR_REPO: 123456789012.dkr.ecr.us-west-2.amazonaws.com
`, Namespace, o.Username, o.Password, o.RepoURL, o.Branch, url)
	if err := cp.Apply(ctx, []byte(objects)); err != nil {
		return nil, err
	}
	p := &Platform{ChartURL: url, chartsDir: charts}
	for _, f := range []string{"tenants.yaml", "pooled-envs.yaml"} {
		b, err := platformFS.ReadFile("platform/" + f)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(b)
		if err != nil {
			return nil, err
		}
		for _, ob := range objs {
			p.Kustomizations = append(p.Kustomizations, ob.GetName())
		}
		if err := cp.Apply(ctx, b); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// PackageChart packages the platform's tenant chart at each version into
// out, with an index.yaml whose URLs start with baseURL. Its values come
// from the chart's values.yaml.template with test values for its
// placeholders, as the platform's scripts fill them in.
func PackageChart(src, out, baseURL string, versions []string) error {
	sub, err := fs.Sub(platformFS, "platform/helm-tenant-chart")
	if err != nil {
		return err
	}
	if err := os.CopyFS(src, sub); err != nil {
		return err
	}
	tmpl, err := os.ReadFile(filepath.Join(src, "values.yaml.template"))
	if err != nil {
		return err
	}
	values := strings.NewReplacer("{account_id}", "123456789012",
		"{ecr_repository_urls_producer}", "123456789012.dkr.ecr.us-west-2.amazonaws.com/producer",
		"{ecr_repository_urls_consumer}", "123456789012.dkr.ecr.us-west-2.amazonaws.com/consumer").Replace(string(tmpl))
	if err := os.WriteFile(filepath.Join(src, "values.yaml"), []byte(values), 0o644); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(src, "values.yaml.template")); err != nil {
		return err
	}
	ch, err := loader.LoadDir(src)
	if err != nil {
		return fmt.Errorf("load the tenant chart: %w", err)
	}
	for _, v := range versions {
		ch.Metadata.Version, ch.Metadata.AppVersion = v, v
		if _, err := chartutil.Save(ch, out); err != nil {
			return fmt.Errorf("package the tenant chart %s: %w", v, err)
		}
	}
	idx, err := repo.IndexDirectory(out, baseURL)
	if err != nil {
		return err
	}
	return idx.WriteFile(filepath.Join(out, "index.yaml"), 0o644)
}

// AddChart packages the chart in folder src into the Helm repository at
// ChartURL too (the worker's own chart, for one).
func (p *Platform) AddChart(src string) error {
	ch, err := loader.LoadDir(src)
	if err != nil {
		return fmt.Errorf("load chart %s: %w", src, err)
	}
	if _, err := chartutil.Save(ch, p.chartsDir); err != nil {
		return fmt.Errorf("package chart %s: %w", src, err)
	}
	idx, err := repo.IndexDirectory(p.chartsDir, p.ChartURL)
	if err != nil {
		return err
	}
	return idx.WriteFile(filepath.Join(p.chartsDir, "index.yaml"), 0o644)
}
