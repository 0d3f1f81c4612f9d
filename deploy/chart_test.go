package deploy_test

import (
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/httpserver"
)

const chartDir = "helm/tenant-worker"

// rendered is the chart rendered with one set of values, decoded.
type rendered struct {
	deployment     *appsv1.Deployment
	configMap      *corev1.ConfigMap
	serviceAccount *corev1.ServiceAccount
	service        *corev1.Service
	pdb            *policyv1.PodDisruptionBudget
	serviceMonitor *monitoringv1.ServiceMonitor
	rule           *monitoringv1.PrometheusRule
	scaledObject   *kedav1alpha1.ScaledObject
	triggerAuth    *kedav1alpha1.TriggerAuthentication
	// The readiness RBAC.
	role               *rbacv1.Role
	roleBinding        *rbacv1.RoleBinding
	clusterRole        *rbacv1.ClusterRole
	clusterRoleBinding *rbacv1.ClusterRoleBinding
	raw                string
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("chart metadata: %v", err)
	}
	return c
}

// render renders the chart the way `helm install tenant-worker` into the
// tenant-worker namespace would, and decodes every object strictly.
func render(t *testing.T, c *chart.Chart, values map[string]any) *rendered {
	t.Helper()
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{
		Name: "tenant-worker", Namespace: "tenant-worker", Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	files, err := engine.Render(c, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	r := &rendered{}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		r.raw += files[name]
		decodeAll(t, splitManifests(t, name, []byte(files[name])), map[string]any{
			"Deployment": &r.deployment, "ConfigMap": &r.configMap, "ServiceAccount": &r.serviceAccount,
			"Service": &r.service, "PodDisruptionBudget": &r.pdb, "ServiceMonitor": &r.serviceMonitor,
			"PrometheusRule": &r.rule, "ScaledObject": &r.scaledObject, "TriggerAuthentication": &r.triggerAuth,
			"Role": &r.role, "RoleBinding": &r.roleBinding, "ClusterRole": &r.clusterRole, "ClusterRoleBinding": &r.clusterRoleBinding,
		})
	}
	if r.deployment == nil || r.configMap == nil || r.service == nil {
		t.Fatalf("the chart rendered no Deployment, ConfigMap or Service:\n%s", r.raw)
	}
	return r
}

func TestChartDefaults(t *testing.T) {
	r := render(t, loadChart(t), nil)
	d := r.deployment
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("strategy %q, want a rolling update", d.Spec.Strategy.Type)
	}
	checkPod(t, r)
	if r.serviceAccount == nil || d.Spec.Template.Spec.ServiceAccountName != r.serviceAccount.Name {
		t.Errorf("the pod does not run as the chart's ServiceAccount")
	}
	if r.pdb == nil {
		t.Fatal("no PodDisruptionBudget")
	}
	if sel, err := metav1Selector(r.pdb.Spec.Selector); err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("the PodDisruptionBudget does not select the pods (%v)", err)
	}
	if r.serviceMonitor != nil || r.rule != nil || r.scaledObject != nil || r.triggerAuth != nil {
		t.Error("optional objects rendered by default")
	}
	if r.deployment.Spec.Template.Annotations["checksum/config"] == "" {
		t.Error("pods do not roll when the ConfigMap changes")
	}
}

// TestChartSSH: with git.sshSecret the worker reaches the repository over
// SSH with a mounted deploy key and known_hosts, and no token.
func TestChartSSH(t *testing.T) {
	r := render(t, loadChart(t), map[string]any{"git": map[string]any{
		"repoUrl":   "ssh://git@gitea-ssh.gitea.svc.cluster.local:22/admin/eks-saas-gitops.git",
		"sshSecret": map[string]any{"name": "tenant-worker-deploy-key", "passphraseKey": "passphrase"},
	}})
	checkPod(t, r)
	if r.configMap.Data["GIT_SSH_KEY_FILE"] == "" || r.configMap.Data["GIT_SSH_KEY_PASSPHRASE_FILE"] == "" || r.configMap.Data["GIT_TOKEN_FILE"] != "" {
		t.Errorf("ConfigMap %v", r.configMap.Data)
	}
}

func TestChartNonDefaults(t *testing.T) {
	c := loadChart(t)
	values := map[string]any{
		"fullnameOverride": "worker",
		"serviceAccount":   map[string]any{"roleArn": "arn:aws:iam::123456789012:role/tenant-worker"},
		"aws":              map[string]any{"region": "eu-west-1"},
		"queues": map[string]any{
			"onboarding": "https://sqs.eu-west-1.amazonaws.com/123456789012/onboard",
		},
		"git": map[string]any{
			"repoUrl":          "https://gitea.example.com/saas/gitops.git",
			"branch":           "production",
			"tokenSecret":      map[string]any{"name": "gitea-admin", "key": "api-token"},
			"signingKeySecret": map[string]any{"name": "worker-signing", "key": "id_ed25519", "passphraseKey": "passphrase"},
		},
		"shutdownGraceSeconds": 90,
		"clone":                map[string]any{"medium": "Memory", "sizeLimit": "512Mi"},
		"service":              map[string]any{"port": 9090},
		"metrics": map[string]any{
			"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
			"prometheusRule": map[string]any{"enabled": true, "noPushMinutes": 30},
		},
		"keda": map[string]any{"enabled": true, "maxReplicaCount": 8, "queueLength": 10},
	}
	r := render(t, c, values)
	checkPod(t, r)
	d := r.deployment
	if d.Name != "worker" || d.Spec.Replicas != nil {
		t.Errorf("with KEDA the Deployment must leave replicas to the ScaledObject: name %q replicas %v", d.Name, d.Spec.Replicas)
	}
	if got := r.serviceAccount.Annotations["eks.amazonaws.com/role-arn"]; got != "arn:aws:iam::123456789012:role/tenant-worker" {
		t.Errorf("IRSA role annotation = %q", got)
	}
	env := r.configMap.Data
	if env["GIT_BRANCH"] != "production" || env["SHUTDOWN_GRACE"] != "90s" || env["HTTP_ADDR"] != ":9090" ||
		env["ONBOARDING_QUEUE"] != "https://sqs.eu-west-1.amazonaws.com/123456789012/onboard" {
		t.Errorf("values not applied: %v", env)
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 105 {
		t.Errorf("terminationGracePeriodSeconds = %v, want 90+15", g)
	}
	tokenVolume := volume(d, "git-token")
	if tokenVolume.Secret == nil || tokenVolume.Secret.SecretName != "gitea-admin" || tokenVolume.Secret.Items[0].Key != "api-token" {
		t.Errorf("token volume = %+v", tokenVolume)
	}
	if v := volume(d, "clone"); v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("clone volume = %+v", v)
	}

	sm := r.serviceMonitor
	if sm == nil || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != httpserver.MetricsPath ||
		sm.Spec.Endpoints[0].Port != "http" || sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor = %+v", sm)
	} else if sel, err := metav1Selector(&sm.Spec.Selector); err != nil || !sel.Matches(labels.Set(r.service.Labels)) {
		t.Errorf("the ServiceMonitor does not select the Service (%v)", err)
	}

	if r.rule == nil {
		t.Fatal("no PrometheusRule")
	}
	var exprs []string
	for _, g := range r.rule.Spec.Groups {
		for _, rule := range g.Rules {
			exprs = append(exprs, rule.Expr.String())
		}
	}
	if !slices.ContainsFunc(exprs, func(e string) bool { return strings.Contains(e, "30 * 60") }) {
		t.Errorf("noPushMinutes not applied to the rules: %v", exprs)
	}
	checkRuleMetrics(t, exprs)

	so, ta := r.scaledObject, r.triggerAuth
	if so == nil || ta == nil {
		t.Fatal("keda.enabled rendered no ScaledObject or TriggerAuthentication")
	}
	if so.Spec.ScaleTargetRef.Name != d.Name || *so.Spec.MaxReplicaCount != 8 {
		t.Errorf("ScaledObject target %q max %v", so.Spec.ScaleTargetRef.Name, so.Spec.MaxReplicaCount)
	}
	var queues []string
	for _, tr := range so.Spec.Triggers {
		if tr.Type != "aws-sqs-queue" || tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != ta.Name ||
			tr.Metadata["awsRegion"] != "eu-west-1" || tr.Metadata["queueLength"] != "10" {
			t.Errorf("trigger %+v", tr)
		}
		queues = append(queues, tr.Metadata["queueURL"])
	}
	sort.Strings(queues)
	want := []string{env["DEPLOYMENT_QUEUE"], env["OFFBOARDING_QUEUE"], env["ONBOARDING_QUEUE"]}
	sort.Strings(want)
	if !slices.Equal(queues, want) {
		t.Errorf("KEDA watches %v, the worker consumes %v", queues, want)
	}
	if ta.Spec.PodIdentity == nil || ta.Spec.PodIdentity.Provider != kedav1alpha1.PodIdentityProviderAws ||
		ta.Spec.PodIdentity.IdentityOwner == nil || *ta.Spec.PodIdentity.IdentityOwner != "workload" {
		t.Errorf("KEDA must read the queues with the worker's IRSA role: %+v", ta.Spec.PodIdentity)
	}
}

// TestChartRefusesBadValues: missing required values fail the render with
// a clear message instead of producing a broken Deployment.
func TestChartRefusesBadValues(t *testing.T) {
	c := loadChart(t)
	for name, values := range map[string]map[string]any{
		"no repository":   {"git": map[string]any{"repoUrl": ""}},
		"no token secret": {"git": map[string]any{"tokenSecret": map[string]any{"name": ""}}},
		"zero grace":      {"shutdownGraceSeconds": 0},
	} {
		vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: "tenant-worker", Namespace: "tw"}, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := engine.Render(c, vals); err == nil {
			t.Errorf("%s: rendered without error", name)
		}
	}
}

// checkPod asserts the pod settings every rendering must keep.
func checkPod(t *testing.T, r *rendered) {
	t.Helper()
	d := r.deployment
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	ctr := pod.Containers[0]

	// Security.
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	sc := ctr.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security context %+v", sc)
	}
	// The API token only with readiness, which is the only caller of the
	// Kubernetes API, and only with its RBAC.
	readiness := r.configMap.Data["READINESS"] != "off"
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken != readiness {
		t.Errorf("the Kubernetes API token is mounted: %v, readiness: %v", pod.AutomountServiceAccountToken, readiness)
	}
	if readiness != (r.role != nil) {
		t.Errorf("readiness %v with RBAC %v", readiness, r.role != nil)
	}
	if ctr.Resources.Requests.Memory().IsZero() || ctr.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", ctr.Resources)
	}

	// Settings: every one set, all accepted by the worker.
	if len(ctr.EnvFrom) != 1 || ctr.EnvFrom[0].ConfigMapRef == nil || ctr.EnvFrom[0].ConfigMapRef.Name != r.configMap.Name {
		t.Errorf("the container does not take its settings from the ConfigMap: %+v", ctr.EnvFrom)
	}
	for _, e := range ctr.Env {
		t.Errorf("env %s set outside the ConfigMap", e.Name)
	}
	o := checkSettings(t, "the chart's ConfigMap", r.configMap.Data)

	// No secret in values or in the ConfigMap: the token is a mounted file.
	if r.configMap.Data["GIT_TOKEN"] != "" || strings.Contains(r.raw, "kind: Secret") {
		t.Error("the chart carries a secret")
	}
	if o.GitSSHKeyFile == "" {
		tokenDir := strings.TrimSuffix(o.GitTokenFile, "/token")
		if !mountedAt(ctr, "git-token", tokenDir, true) || volume(d, "git-token").Secret == nil ||
			volume(d, "git-token").Secret.Items[0].Path != "token" {
			t.Errorf("GIT_TOKEN_FILE %s is not the mounted Secret", o.GitTokenFile)
		}
	} else {
		// SSH: the key and known_hosts (and passphrase) are the mounted
		// Secret, and no token is mounted.
		v := volume(d, "git-ssh").Secret
		dir := path.Dir(o.GitSSHKeyFile)
		if v == nil || !mountedAt(ctr, "git-ssh", dir, true) || path.Dir(o.GitKnownHostsFile) != dir ||
			volume(d, "git-token").Secret != nil || o.GitTokenFile != "" {
			t.Errorf("GIT_SSH_KEY_FILE %s / GIT_KNOWN_HOSTS_FILE %s are not the mounted Secret", o.GitSSHKeyFile, o.GitKnownHostsFile)
		} else {
			paths := map[string]bool{}
			for _, it := range v.Items {
				paths[it.Path] = true
			}
			for _, f := range []string{o.GitSSHKeyFile, o.GitKnownHostsFile, o.GitSSHKeyPassphraseFile} {
				if f != "" && !paths[path.Base(f)] {
					t.Errorf("%s is not in the mounted Secret", f)
				}
			}
		}
	}

	// The signing key, when set, is the mounted Secret too.
	if o.GitSigningKeyFile == "" {
		if o.GitSigningPassphraseFile != "" || volume(d, "signing-key").Secret != nil {
			t.Error("a signing key volume or passphrase without GIT_SIGNING_KEY_FILE")
		}
	} else {
		dir := path.Dir(o.GitSigningKeyFile)
		v := volume(d, "signing-key").Secret
		if !mountedAt(ctr, "signing-key", dir, true) || v == nil || v.Items[0].Path != path.Base(o.GitSigningKeyFile) {
			t.Errorf("GIT_SIGNING_KEY_FILE %s is not the mounted Secret", o.GitSigningKeyFile)
		}
		if p := o.GitSigningPassphraseFile; p != "" && (path.Dir(p) != dir || len(v.Items) != 2 || v.Items[1].Path != path.Base(p)) {
			t.Errorf("GIT_SIGNING_PASSPHRASE_FILE %s is not in the mounted Secret", p)
		}
	}

	// The clone is on an emptyDir, the only writable path besides /tmp.
	if v := volume(d, "clone"); v.EmptyDir == nil || !mountedUnder(ctr, "clone", o.GitCloneDir) {
		t.Errorf("GIT_CLONE_DIR %s is not on the clone emptyDir", o.GitCloneDir)
	}
	for _, m := range ctr.VolumeMounts {
		if v := volume(d, m.Name); v.EmptyDir == nil && !m.ReadOnly {
			t.Errorf("volume %s is writable", m.Name)
		}
	}

	// Grace: the kubelet waits longer than the worker's shutdown grace.
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= o.ShutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %v is not above SHUTDOWN_GRACE %s", g, o.ShutdownGrace)
	}

	// Probes and ports point at what the binary serves.
	_, port, _ := strings.Cut(o.HTTPAddr, ":")
	if len(ctr.Ports) != 1 || ctr.Ports[0].Name != "http" || strconv.Itoa(int(ctr.Ports[0].ContainerPort)) != port {
		t.Errorf("container ports %+v, HTTP_ADDR %s", ctr.Ports, o.HTTPAddr)
	}
	h := httpserver.Handler(prometheus.NewRegistry(), func() error { return nil }, nil)
	for name, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe, "startup": ctr.StartupProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v", name, p)
			continue
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.HTTPGet.Path, nil))
		if rec.Code != http.StatusOK {
			t.Errorf("%s probe %s: the worker answers %d", name, p.HTTPGet.Path, rec.Code)
		}
	}
	if ctr.LivenessProbe.HTTPGet.Path != httpserver.HealthPath || ctr.ReadinessProbe.HTTPGet.Path != httpserver.ReadyPath {
		t.Errorf("liveness %s, readiness %s", ctr.LivenessProbe.HTTPGet.Path, ctr.ReadinessProbe.HTTPGet.Path)
	}
	if sel := labels.SelectorFromSet(r.service.Spec.Selector); !sel.Matches(labels.Set(d.Spec.Template.Labels)) ||
		r.service.Spec.Ports[0].TargetPort.String() != "http" {
		t.Errorf("the Service does not reach the pods' http port")
	}
}

func volume(d *appsv1.Deployment, name string) corev1.Volume {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	return corev1.Volume{}
}

func mountedAt(c corev1.Container, vol, path string, readOnly bool) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == vol && m.MountPath == path && m.ReadOnly == readOnly {
			return true
		}
	}
	return false
}

func mountedUnder(c corev1.Container, vol, path string) bool {
	for _, m := range c.VolumeMounts {
		if m.Name == vol && strings.HasPrefix(path+"/", strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

// TestChartValuesHoldNoSecret walks values.yaml: a key that sounds like a
// secret may only name the Secret that holds it.
func TestChartValuesHoldNoSecret(t *testing.T) {
	c := loadChart(t)
	var walk func(path string, v any)
	secretish := regexp.MustCompile(`(?i)token|password|secret|credential|key`)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(path+"."+k, x)
			}
		default:
			if !secretish.MatchString(path) {
				return
			}
			switch path {
			case ".git.tokenSecret.name", ".git.tokenSecret.key", ".imagePullSecrets",
				".git.signingKeySecret.name", ".git.signingKeySecret.key", ".git.signingKeySecret.passphraseKey",
				".git.sshSecret.name", ".git.sshSecret.key", ".git.sshSecret.passphraseKey", ".git.sshSecret.knownHostsKey":
				return
			}
			t.Errorf("values%s = %v looks like a secret value", path, v)
		}
	}
	walk("", c.Values)
	if _, err := yaml.Marshal(c.Values); err != nil {
		t.Fatal(err)
	}
}

func metav1Selector(s *metav1.LabelSelector) (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s)
}
