package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/fstest"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
)

// TestWorkerDeploymentOnTheControlPlane installs the worker the way the
// README says, for real: deploy/flux committed to the GitOps repository
// under control-plane/production/tenant-worker/, applied by Flux's
// kustomize-controller (with ${aws_region} and ${tenant_worker_role_arn}
// from saas-infra-outputs), and the chart installed by helm-controller. The
// API server must accept every object the chart renders; the
// ServiceAccount, RBAC, ConfigMap and the token Secret's mount must be as
// rendered. The only change to deploy/flux is where the chart comes from:
// the test serves it over HTTP instead of ghcr.io's OCI registry.
func TestWorkerDeploymentOnTheControlPlane(t *testing.T) {
	t.Parallel()
	h := newHarness(t, false)
	c := startCluster(t, h)
	ctx := context.Background()
	if err := c.platform.AddChart(filepath.Join("..", "deploy", "helm", "tenant-worker")); err != nil {
		t.Fatal(err)
	}

	// deploy/flux in a platform repository, as its kustomization.yaml says.
	seed := fstest.MapFS{}
	for _, f := range []string{"kustomization.yaml", "namespace.yaml", "helmrepository.yaml", "helmrelease.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "deploy", "flux", f))
		if err != nil {
			t.Fatal(err)
		}
		seed["control-plane/production/tenant-worker/"+f] = &fstest.MapFile{Data: b, Mode: 0o644}
	}
	if _, err := h.git.CreateRepo("platform.git", "main", seed); err != nil {
		t.Fatal(err)
	}
	const roleArn = "arn:aws:iam::123456789012:role/tenant-worker"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-worker"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objects := fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: tenant-worker-git-token, namespace: tenant-worker}
stringData: {token: %[1]q}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: saas-infra-outputs, namespace: flux-system}
data:
  aws_region: us-west-2
  account_id: "123456789012"
  tenant_worker_role_arn: %[2]q
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: platform, namespace: flux-system}
spec:
  interval: 1m0s
  url: %[3]q
  ref: {branch: main}
  secretRef: {name: flux-system}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: controlplane, namespace: flux-system}
spec:
  interval: 1m0s
  sourceRef: {kind: GitRepository, name: platform}
  path: ./control-plane/production/tenant-worker
  prune: true
  postBuild:
    substituteFrom:
      - {kind: ConfigMap, name: saas-infra-outputs}
  patches:
    - target: {kind: HelmRepository, name: tenant-worker}
      patch: |
        - {op: replace, path: /spec/type, value: default}
        - {op: replace, path: /spec/url, value: %[4]q}
`, h.token, roleArn, h.git.RepoURL("platform.git"), c.platform.ChartURL)
	if err := c.Apply(ctx, []byte(objects)); err != nil {
		t.Fatal(err)
	}

	// Applied by kustomize-controller, installed by helm-controller.
	h.waitFor("the worker's HelmRelease to be ready", 3*time.Minute, func() bool {
		hr, err := c.Dynamic.Resource(flux.HelmReleases).Namespace("flux-system").Get(ctx, "tenant-worker", metav1.GetOptions{})
		return err == nil && controlplane.ConditionTrue(hr, "Ready")
	})

	// Every object as rendered.
	sa, err := c.Client.CoreV1().ServiceAccounts("tenant-worker").Get(ctx, "tenant-worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sa.Annotations["eks.amazonaws.com/role-arn"] != roleArn {
		t.Errorf("IRSA annotation %q: the saas-infra-outputs substitution did not happen", sa.Annotations["eks.amazonaws.com/role-arn"])
	}
	dep, err := c.Client.AppsV1().Deployments("tenant-worker").Get(ctx, "tenant-worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	if pod.ServiceAccountName != sa.Name || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("the pod runs as %q with token %v", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	mounted := false
	for _, v := range pod.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "tenant-worker-git-token" {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the token Secret is not mounted: %+v", pod.Volumes)
	}
	cm, err := c.Client.CoreV1().ConfigMaps("tenant-worker").Get(ctx, "tenant-worker", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["AWS_REGION"] != "us-west-2" || cm.Data["READINESS"] != "auto" || cm.Data["FLUX_KUSTOMIZATIONS"] != "dataplane-tenants,dataplane-pooled-envs" {
		t.Errorf("ConfigMap %v", cm.Data)
	}
	role, err := c.Client.RbacV1().Roles("flux-system").Get(ctx, "tenant-worker-readiness", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 8 { // the 8 TestChartRBAC checks one by one
		t.Errorf("Role rules %+v", role.Rules)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Get(ctx, "tenant-worker-discovery", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	rb, err := c.Client.RbacV1().RoleBindings("flux-system").Get(ctx, "tenant-worker-readiness", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(rb.Subjects, func(s rbacv1.Subject) bool { return s.Name == sa.Name && s.Namespace == "tenant-worker" }) {
		t.Errorf("RoleBinding subjects %+v", rb.Subjects)
	}
	// The API server decides what the service account may do, as the
	// worker in that pod would be asked.
	for _, tc := range []struct {
		verb, group, resource, name string
		allowed                     bool
	}{
		{"list", "helm.toolkit.fluxcd.io", "helmreleases", "", true},
		{"patch", "kustomize.toolkit.fluxcd.io", "kustomizations", "dataplane-tenants", true},
		{"patch", "kustomize.toolkit.fluxcd.io", "kustomizations", "controlplane", false},
		{"patch", "helm.toolkit.fluxcd.io", "helmreleases", "rd-prem-premium", false},
		{"get", "", "secrets", "flux-system", false},
		// The readiness record: that one ConfigMap, and no other.
		{"update", "", "configmaps", "tenant-worker-readiness", true},
		{"update", "", "configmaps", "saas-infra-outputs", false},
		{"get", "", "configmaps", "saas-infra-outputs", false},
	} {
		if got := c.can(t, "system:serviceaccount:tenant-worker:"+sa.Name, tc.verb, tc.group, tc.resource, tc.name); got != tc.allowed {
			t.Errorf("%s %s/%s %q: allowed %v, want %v", tc.verb, tc.group, tc.resource, tc.name, got, tc.allowed)
		}
	}
	if _, err := c.Client.CoreV1().Secrets("tenant-worker").Get(ctx, "tenant-worker-git-token", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("the token Secret is gone")
	}
}

// can asks the API server whether user may do verb on a resource in
// flux-system (a SubjectAccessReview).
func (c *cluster) can(t *testing.T, user, verb, group, resource, name string) bool {
	t.Helper()
	r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: controlplane.Namespace, Verb: verb, Group: group, Resource: resource, Name: name}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}
