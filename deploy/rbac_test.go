package deploy_test

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestChartRBAC: with readiness the chart grants exactly get, list and
// watch on GitRepositories, Kustomizations, HelmReleases and
// ExternalArtifacts in the Flux namespace, patch on the GitRepository and the Kustomizations it names
// (nothing else of theirs), and discovery; bound to the worker's
// ServiceAccount. Without readiness it grants nothing and mounts no token.
// The readiness test on the control plane runs the worker with exactly
// these rules (integration, TestReadinessOnARealControlPlane).
func TestChartRBAC(t *testing.T) {
	c := loadChart(t)
	r := render(t, c, map[string]any{"readiness": map[string]any{
		"fluxNamespace": "flux", "gitRepository": "platform", "kustomizations": []any{"tenants", "pools"},
	}})
	if r.role == nil || r.roleBinding == nil || r.clusterRole == nil || r.clusterRoleBinding == nil {
		t.Fatalf("readiness RBAC missing:\n%s", r.raw)
	}
	read := []string{"get", "list", "watch"}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"source.toolkit.fluxcd.io"}, Resources: []string{"gitrepositories"}, Verbs: read},
		{APIGroups: []string{"kustomize.toolkit.fluxcd.io"}, Resources: []string{"kustomizations"}, Verbs: read},
		{APIGroups: []string{"helm.toolkit.fluxcd.io"}, Resources: []string{"helmreleases"}, Verbs: read},
		{APIGroups: []string{"source.toolkit.fluxcd.io"}, Resources: []string{"externalartifacts"}, Verbs: read},
		{APIGroups: []string{"source.toolkit.fluxcd.io"}, Resources: []string{"gitrepositories"}, ResourceNames: []string{"platform"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"kustomize.toolkit.fluxcd.io"}, Resources: []string{"kustomizations"}, ResourceNames: []string{"tenants", "pools"}, Verbs: []string{"patch"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"tenant-worker-readiness"}, Verbs: []string{"get", "update"}},
	}
	if r.role.Namespace != "flux" || !reflect.DeepEqual(r.role.Rules, want) {
		t.Errorf("Role in %q:\n%+v\nwant\n%+v", r.role.Namespace, r.role.Rules, want)
	}
	discovery := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/api", "/api/*", "/apis", "/apis/*"}, Verbs: []string{"get"}}}
	if !reflect.DeepEqual(r.clusterRole.Rules, discovery) {
		t.Errorf("ClusterRole %+v, want only discovery %+v", r.clusterRole.Rules, discovery)
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: r.serviceAccount.Name, Namespace: "tenant-worker"}
	for _, b := range []struct {
		name     string
		ref      rbacv1.RoleRef
		subjects []rbacv1.Subject
		role     string
		kind     string
	}{
		{"RoleBinding", r.roleBinding.RoleRef, r.roleBinding.Subjects, r.role.Name, "Role"},
		{"ClusterRoleBinding", r.clusterRoleBinding.RoleRef, r.clusterRoleBinding.Subjects, r.clusterRole.Name, "ClusterRole"},
	} {
		if b.ref.Kind != b.kind || b.ref.Name != b.role || !reflect.DeepEqual(b.subjects, []rbacv1.Subject{sa}) {
			t.Errorf("%s binds %+v to %+v", b.name, b.ref, b.subjects)
		}
	}
	if r.roleBinding.Namespace != "flux" {
		t.Errorf("RoleBinding in %q", r.roleBinding.Namespace)
	}
	if cm := r.configMap.Data; cm["FLUX_NAMESPACE"] != "flux" || cm["FLUX_GIT_REPOSITORY"] != "platform" || cm["FLUX_KUSTOMIZATIONS"] != "tenants,pools" || cm["READINESS_RECORD"] != "tenant-worker-readiness" {
		t.Errorf("the worker is not told the names the RBAC grants: %v", cm)
	}

	off := render(t, c, map[string]any{"readiness": map[string]any{"enabled": false}})
	if off.role != nil || off.roleBinding != nil || off.clusterRole != nil || off.clusterRoleBinding != nil {
		t.Error("RBAC rendered without readiness")
	}
	if off.configMap.Data["READINESS"] != "off" {
		t.Errorf("READINESS = %q without readiness", off.configMap.Data["READINESS"])
	}
}

// TestChartArtifactsRBAC: with artifacts on (readiness off, to see its
// rules alone) the chart grants exactly get, list and create on ExternalArtifacts
// and Kustomizations in the Flux namespace and update on ExternalArtifacts'
// status, bound to the worker's ServiceAccount, whose token is then mounted;
// the worker is told the Service's URL and the port is served. On a
// control plane the worker publishes with exactly these rules
// (TestWorkerPublishesShardArtifacts and TestReadinessWithShardKustomizations
// run it with the chart's identity).
func TestChartArtifactsRBAC(t *testing.T) {
	r := render(t, loadChart(t), map[string]any{
		"readiness": map[string]any{"enabled": false, "fluxNamespace": "flux"},
		"artifacts": map[string]any{"enabled": true, "port": 9090},
	})
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"source.toolkit.fluxcd.io"}, Resources: []string{"externalartifacts"}, Verbs: []string{"get", "list", "create"}},
		{APIGroups: []string{"source.toolkit.fluxcd.io"}, Resources: []string{"externalartifacts/status"}, Verbs: []string{"update"}},
		{APIGroups: []string{"kustomize.toolkit.fluxcd.io"}, Resources: []string{"kustomizations"}, Verbs: []string{"get", "list", "create"}},
	}
	if r.role == nil || r.role.Namespace != "flux" || !reflect.DeepEqual(r.role.Rules, want) {
		t.Fatalf("artifacts Role:\n%+v\nwant\n%+v", r.role, want)
	}
	sa := rbacv1.Subject{Kind: "ServiceAccount", Name: r.serviceAccount.Name, Namespace: "tenant-worker"}
	if b := r.roleBinding; b == nil || b.RoleRef.Name != r.role.Name || !reflect.DeepEqual(b.Subjects, []rbacv1.Subject{sa}) {
		t.Errorf("artifacts RoleBinding %+v", b)
	}
	if r.clusterRole != nil {
		t.Errorf("artifacts alone grant cluster rules: %+v", r.clusterRole.Rules)
	}
	if m := r.deployment.Spec.Template.Spec.AutomountServiceAccountToken; m == nil || !*m {
		t.Error("the pod mounts no token: the worker cannot publish")
	}
	if got := r.configMap.Data["ARTIFACT_URL"]; got != "http://tenant-worker.tenant-worker.svc:9090" || r.configMap.Data["ARTIFACT_ADDR"] != ":9090" {
		t.Errorf("ARTIFACT_URL %q, ARTIFACT_ADDR %q", got, r.configMap.Data["ARTIFACT_ADDR"])
	}
	if got := r.configMap.Data["ARTIFACT_INTERVAL"]; got != "10m" {
		t.Errorf("ARTIFACT_INTERVAL %q, want the chart's default 10m", got)
	}
	served := false
	for _, p := range r.service.Spec.Ports {
		served = served || p.Name == "artifacts" && p.Port == 9090
	}
	if !served {
		t.Errorf("the Service does not serve the artifacts port: %+v", r.service.Spec.Ports)
	}
	off := render(t, loadChart(t), nil)
	if off.configMap.Data["ARTIFACT_URL"] != "" || len(off.service.Spec.Ports) != 1 {
		t.Errorf("by default: ARTIFACT_URL %q, ports %+v", off.configMap.Data["ARTIFACT_URL"], off.service.Spec.Ports)
	}
}
