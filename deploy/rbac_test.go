package deploy_test

import (
	"reflect"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestChartRBAC: with readiness the chart grants exactly get, list and
// watch on GitRepositories, Kustomizations and HelmReleases in the Flux
// namespace, patch on the GitRepository and the Kustomizations it names
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
