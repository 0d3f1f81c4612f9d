package deploy_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/deploy"
)

// TestFluxManifests builds deploy/flux with kustomize, decodes every object
// strictly into the Flux API types, and renders the chart with the
// HelmRelease's values after Flux's ${var} substitution.
func TestFluxManifests(t *testing.T) {
	release, repo, ns := buildFlux(t, filesys.MakeFsOnDisk(), "flux")
	if release.APIVersion != helmv2.GroupVersion.String() || repo.APIVersion != sourcev1.GroupVersion.String() {
		t.Errorf("API versions %s, %s", release.APIVersion, repo.APIVersion)
	}

	c := loadChart(t)
	spec := release.Spec.Chart.Spec
	if spec.Chart != c.Metadata.Name {
		t.Errorf("HelmRelease installs chart %q, the chart is %q", spec.Chart, c.Metadata.Name)
	}
	constraint, err := semver.NewConstraint(spec.Version)
	if err != nil {
		t.Fatalf("chart version %q: %v", spec.Version, err)
	}
	if !constraint.Check(semver.MustParse(c.Metadata.Version)) {
		t.Errorf("HelmRelease version %q does not accept the chart's version %s", spec.Version, c.Metadata.Version)
	}
	ref := spec.SourceRef
	if ref.Kind != sourcev1.HelmRepositoryKind || ref.Name != repo.Name || ref.Namespace != repo.Namespace {
		t.Errorf("HelmRelease source %+v is not the HelmRepository %s/%s", ref, repo.Namespace, repo.Name)
	}
	if release.Spec.TargetNamespace != ns.Name {
		t.Errorf("the release goes to %q, the Namespace is %q", release.Spec.TargetNamespace, ns.Name)
	}
	if repo.Spec.Type != sourcev1.HelmRepositoryTypeOCI || !strings.HasPrefix(repo.Spec.URL, "oci://") {
		t.Errorf("HelmRepository %s %s", repo.Spec.Type, repo.Spec.URL)
	}

	r := render(t, c, substituted(t, release))
	checkPod(t, r)
	if r.serviceAccount.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Error("the HelmRelease does not give the worker its IRSA role")
	}
	if _, err := os.Stat("flux/kustomization.yaml"); err != nil {
		t.Fatal(err)
	}
}

// buildFlux builds deploy/flux (at dir of fSys) with kustomize and decodes
// every object strictly into the Flux API types: it must hold a Namespace,
// a HelmRepository and a HelmRelease, and nothing else.
func buildFlux(t *testing.T, fSys filesys.FileSystem, dir string) (*helmv2.HelmRelease, *sourcev1.HelmRepository, *corev1.Namespace) {
	t.Helper()
	resmap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fSys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := resmap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	var (
		release *helmv2.HelmRelease
		repo    *sourcev1.HelmRepository
		ns      *corev1.Namespace
	)
	decodeAll(t, splitManifests(t, dir, out), map[string]any{
		"HelmRelease": &release, "HelmRepository": &repo, "Namespace": &ns,
	})
	if release == nil || repo == nil || ns == nil {
		t.Fatalf("%s must hold a Namespace, a HelmRepository and a HelmRelease:\n%s", dir, out)
	}
	return release, repo, ns
}

// substituted is the HelmRelease's values after Flux's postBuild
// substitution, which fills ${var} from saas-infra-outputs: here with
// sample values.
func substituted(t *testing.T, release *helmv2.HelmRelease) map[string]any {
	t.Helper()
	raw := regexp.MustCompile(`\$\{(\w+)\}`).ReplaceAllStringFunc(string(release.Spec.Values.Raw), func(v string) string {
		return map[string]string{
			"${tenant_worker_role_arn}": "arn:aws:iam::123456789012:role/tenant-worker",
			"${aws_region}":             "us-west-2",
		}[v]
	})
	var values map[string]any
	if err := yaml.Unmarshal([]byte(raw), &values); err != nil {
		t.Fatal(err)
	}
	return values
}

// TestFluxShardKustomizationComponents: the two components deploy/flux
// ships for shard folders with Kustomizations of their own do what their
// comments say, used as they say. shard-kustomizations, a component of
// deploy/flux, turns the worker's artifacts on: the chart rendered with
// the HelmRelease's values serves them and grants the rules to publish.
// kustomize-controller, a component of the folder Flux was bootstrapped
// from, adds the flags the tests run kustomize-controller with to its
// Deployment, keeping its own.
func TestFluxShardKustomizationComponents(t *testing.T) {
	fSys := filesys.MakeFsInMemory()
	// deploy/flux as committed to control-plane/production/tenant-worker.
	tw := "/repo/control-plane/production/tenant-worker"
	err := filepath.WalkDir("flux", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if p == filepath.Join("flux", "kustomization.yaml") {
			b = append(b, "components:\n  - shard-kustomizations\n"...)
		}
		return fSys.WriteFile(path.Join(tw, strings.TrimPrefix(filepath.ToSlash(p), "flux/")), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	release, _, _ := buildFlux(t, fSys, tw)
	r := render(t, loadChart(t), substituted(t, release))
	if r.role == nil || r.configMap.Data["ARTIFACT_URL"] == "" || r.serviceAccount.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Errorf("with the component: artifacts Role %v, ARTIFACT_URL %q, IRSA role %q; want the artifacts on and the rest kept",
			r.role != nil, r.configMap.Data["ARTIFACT_URL"], r.serviceAccount.Annotations["eks.amazonaws.com/role-arn"])
	}

	// The bootstrap folder, its kustomize-controller as flux install
	// writes it (args abridged).
	flux := "/repo/clusters/production/flux-system"
	if err := fSys.WriteFile(path.Join(flux, "gotk-components.yaml"), []byte(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: kustomize-controller
  namespace: flux-system
spec:
  selector:
    matchLabels:
      app: kustomize-controller
  template:
    metadata:
      labels:
        app: kustomize-controller
    spec:
      containers:
        - name: manager
          image: ghcr.io/fluxcd/kustomize-controller:v1.9.6
          args:
            - --events-addr=http://notification-controller.flux-system.svc.cluster.local./
            - --watch-all-namespaces=true
            - --log-level=info
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: helm-controller
  namespace: flux-system
spec:
  selector:
    matchLabels:
      app: helm-controller
  template:
    metadata:
      labels:
        app: helm-controller
    spec:
      containers:
        - name: manager
          image: ghcr.io/fluxcd/helm-controller:v1.6.4
          args:
            - --events-addr=http://notification-controller.flux-system.svc.cluster.local./
            - --watch-all-namespaces=true
            - --log-level=info
`)); err != nil {
		t.Fatal(err)
	}
	if err := fSys.WriteFile(path.Join(flux, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - gotk-components.yaml
components:
  - ../../../control-plane/production/tenant-worker/kustomize-controller
  - ../../../control-plane/production/tenant-worker/helm-controller
`)); err != nil {
		t.Fatal(err)
	}
	resmap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fSys, flux)
	if err != nil {
		t.Fatalf("kustomize build of the bootstrap folder with the component: %v", err)
	}
	out, err := resmap.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	deployments := map[string]*appsv1.Deployment{}
	for _, doc := range splitManifests(t, "flux-system with the controllers' components", out) {
		var d *appsv1.Deployment
		decodeAll(t, []object{doc}, map[string]any{"Deployment": &d})
		if d != nil {
			deployments[d.Name] = d
		}
	}
	for _, c := range []struct {
		name  string
		flags func() ([]string, error)
		must  string
	}{
		{"kustomize-controller", deploy.KustomizeControllerFlags, "--feature-gates=ExternalArtifact=true"},
		{"helm-controller", deploy.HelmControllerFlags, "--concurrent=10"},
	} {
		d := deployments[c.name]
		if d == nil {
			t.Fatalf("no Deployment %s:\n%s", c.name, out)
		}
		flags, err := c.flags()
		if err != nil {
			t.Fatal(err)
		}
		args := d.Spec.Template.Spec.Containers[0].Args
		want := append([]string{"--events-addr=http://notification-controller.flux-system.svc.cluster.local./", "--watch-all-namespaces=true", "--log-level=info"}, flags...)
		if !slices.Equal(args, want) || !slices.Contains(flags, c.must) {
			t.Errorf("%s's args %q, want %q with %s", c.name, args, want, c.must)
		}
	}
}

// TestFluxVerifyExample: deploy/flux/verify is a GitRepository that makes
// Flux verify the signature of HEAD, and the Secret of public keys it names,
// with its keys named as source-controller reads them (.asc for OpenPGP,
// .sshpub for SSH).
func TestFluxVerifyExample(t *testing.T) {
	var (
		repo   *sourcev1.GitRepository
		secret *corev1.Secret
	)
	for _, f := range []string{"flux/verify/gitrepository.yaml", "flux/verify/secret.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		decodeAll(t, splitManifests(t, f, b), map[string]any{"GitRepository": &repo, "Secret": &secret})
	}
	if repo == nil || secret == nil {
		t.Fatal("deploy/flux/verify must hold a GitRepository and a Secret")
	}
	v := repo.Spec.Verification
	if v == nil || v.Mode != sourcev1.ModeGitHEAD || v.SecretRef.Name != secret.Name || repo.Namespace != secret.Namespace {
		t.Fatalf("spec.verify %+v does not check HEAD against Secret %s/%s", v, secret.Namespace, secret.Name)
	}
	if len(secret.StringData) == 0 {
		t.Fatal("the Secret lists no key")
	}
	for k := range secret.StringData {
		if !strings.HasSuffix(k, ".asc") && !strings.HasSuffix(k, ".sshpub") {
			t.Errorf("Secret key %q: source-controller reads only .asc and .sshpub keys", k)
		}
	}
}
