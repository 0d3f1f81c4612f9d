package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/Masterminds/semver/v3"
	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	sourcev1 "github.com/fluxcd/source-controller/api/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestFluxManifests builds deploy/flux with kustomize, decodes every object
// strictly into the Flux API types, and renders the chart with the
// HelmRelease's values after Flux's ${var} substitution.
func TestFluxManifests(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resmap, err := k.Run(filesys.MakeFsOnDisk(), "flux")
	if err != nil {
		t.Fatalf("kustomize build deploy/flux: %v", err)
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
	decodeAll(t, splitManifests(t, "deploy/flux", out), map[string]any{
		"HelmRelease": &release, "HelmRepository": &repo, "Namespace": &ns,
	})
	if release == nil || repo == nil || ns == nil {
		t.Fatalf("deploy/flux must hold a Namespace, a HelmRepository and a HelmRelease:\n%s", out)
	}
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

	// Flux's postBuild substitution fills ${var} from saas-infra-outputs;
	// fill them with sample values and render the chart with the result.
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
	r := render(t, c, values)
	checkPod(t, r)
	if r.serviceAccount.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Error("the HelmRelease does not give the worker its IRSA role")
	}
	if _, err := os.Stat("flux/kustomization.yaml"); err != nil {
		t.Fatal(err)
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
