// Package controlplane runs a Kubernetes control plane with Flux on
// loopback for tests, without Docker: etcd, kube-apiserver,
// kube-controller-manager and Flux's source-, kustomize- and helm-controller,
// built from their Go modules by `make controlplane` (build.sh), started
// with certificates made here, and stopped by PID.
//
// What a real cluster has and this one lacks, it stands in for (StandIn):
// no kubelet runs pods, so Deployments and the tenant chart's Terraform
// objects get their status written by the test; kube-controller-manager
// runs without its deployment and replicaset controllers, which would fight
// that status. The HelmRelease CRD also serves helm.toolkit.fluxcd.io/v2beta1
// (ServeV2beta1), which the platform's templates still use and current Flux
// no longer serves.
package controlplane

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/tenant-worker/tenant-worker/internal/testenv/cputime"
	"github.com/tenant-worker/tenant-worker/internal/testenv/loopback"
)

// Versions the Makefile builds (build.sh's defaults).
const (
	KubeVersion      = "v1.36.3"
	EtcdVersion      = "v3.6.16"
	SourceVersion    = "v1.9.6"
	KustomizeVersion = "v1.9.6"
	HelmVersion      = "v1.6.4"
)

// Stamp names the build folder: .tools/controlplane-<Stamp>.
const Stamp = "k" + KubeVersion + "-e" + EtcdVersion + "-s" + SourceVersion + "-k" + KustomizeVersion + "-h" + HelmVersion

// Namespace is where the Flux controllers and their objects live.
const Namespace = "flux-system"

// Dir finds the built control plane: $CONTROLPLANE_DIR, or
// .tools/controlplane-<Stamp> at the root of this module.
func Dir() (string, error) {
	if p := os.Getenv("CONTROLPLANE_DIR"); p != "" {
		return p, nil
	}
	bin, err := loopback.Tool(filepath.Join("controlplane-"+Stamp, "bin", "kube-apiserver"), "controlplane")
	if err != nil {
		return "", err
	}
	return filepath.Dir(filepath.Dir(bin)), nil
}

// Options shape a control plane.
type Options struct {
	// ControllerManager runs kube-controller-manager (namespace deletion,
	// service account tokens); without it a deleted namespace stays
	// Terminating.
	ControllerManager bool
	// Flux runs source-, kustomize- and helm-controller.
	Flux bool
	// KustomizeFlags are added to kustomize-controller's (the bench's
	// -live-kustomize-flags, such as --concurrent-ssa).
	KustomizeFlags []string
	// HelmFlags are added to helm-controller's.
	HelmFlags []string
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Kubeconfig is the path of an admin kubeconfig (system:masters).
	Kubeconfig string
	// Config is the admin's client configuration.
	Config *rest.Config
	// Client and Dynamic are admin clients.
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	// Server is the API server's URL; CA its certificate authority (PEM).
	Server string
	CA     []byte

	dir, bin, crds string
	procs          []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error
	log  string
}

// Start runs a control plane with its files under dir. Stop it with Close.
func Start(ctx context.Context, dir string, o Options) (*ControlPlane, error) {
	root, err := Dir()
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{dir: dir, bin: filepath.Join(root, "bin"), crds: filepath.Join(root, "crds")}
	if err := cp.start(ctx, o); err != nil {
		cp.Close()
		return nil, err
	}
	return cp, nil
}

func (cp *ControlPlane) start(ctx context.Context, o Options) error {
	p, err := writePKI(cp.dir)
	if err != nil {
		return err
	}
	cp.CA = p.caPEM
	ports, err := freePorts(4)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	if err := cp.run("etcd", nil,
		"--name=default", "--data-dir="+filepath.Join(cp.dir, "etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return err
	}
	cp.Server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	// API Priority and Fairness stays on, as on EKS and every cluster
	// since Kubernetes 1.20: Flux's controllers then turn their own
	// client-side rate limit (50 requests/s, burst 300) off. With it off
	// here, they throttled themselves as they would not on the platform's
	// cluster: helm-controller installed 75 tenants a minute, and an apply
	// of the tenants folder took minutes instead of seconds.
	if err := cp.run("kube-apiserver", nil,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", apiPort),
		"--tls-cert-file="+p.serverCert, "--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caCert,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC", "--endpoint-reconciler-type=none",
		"--v=0",
	); err != nil {
		return err
	}
	if cp.Kubeconfig, err = writeKubeconfig(cp.dir, cp.Server, p); err != nil {
		return err
	}
	if cp.Config, err = restConfig(cp.Kubeconfig); err != nil {
		return err
	}
	if cp.Client, err = kubernetes.NewForConfig(cp.Config); err != nil {
		return err
	}
	if cp.Dynamic, err = dynamic.NewForConfig(cp.Config); err != nil {
		return err
	}
	if err := cp.waitReady(ctx); err != nil {
		return err
	}
	if o.ControllerManager {
		if err := cp.run("kube-controller-manager", nil,
			"--kubeconfig="+cp.Kubeconfig, "--authentication-kubeconfig="+cp.Kubeconfig, "--authorization-kubeconfig="+cp.Kubeconfig,
			"--leader-elect=false", "--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", kcmPort),
			"--controllers=*,-deployment-controller,-replicaset-controller",
			"--service-account-private-key-file="+p.saKey, "--root-ca-file="+p.caCert,
			"--use-service-account-credentials=false", "--v=0",
		); err != nil {
			return err
		}
	}
	if err := cp.installCRDs(ctx); err != nil {
		return err
	}
	if err := cp.ensureNamespace(ctx, Namespace); err != nil {
		return err
	}
	if o.Flux {
		return cp.startFlux(o)
	}
	return nil
}

// TempDir is the temporary folder (TMPDIR) of the Flux controllers of the
// control plane whose files are under dir.
func TempDir(dir string) string { return filepath.Join(dir, "tmp") }

// startFlux runs the three Flux controllers against this control plane.
func (cp *ControlPlane) startFlux(o Options) error {
	// Each control plane's controllers have a temporary folder of their
	// own. kustomize-controller extracts every archive into
	// $TMPDIR/kustomization-*, and at its start removes every such folder
	// it finds there as left over by a crash: with /tmp shared, starting
	// one control plane deleted the folder another one's
	// kustomize-controller was building from, a parallel test's
	// "kustomize build failed: must build at directory".
	tmp := TempDir(cp.dir)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	env := []string{"KUBECONFIG=" + cp.Kubeconfig, "RUNTIME_NAMESPACE=" + Namespace, "TMPDIR=" + tmp}
	common := func(ports []int) []string {
		return []string{"--enable-leader-election=false", "--watch-all-namespaces=true", "--log-level=info",
			fmt.Sprintf("--metrics-addr=127.0.0.1:%d", ports[0]), fmt.Sprintf("--health-addr=127.0.0.1:%d", ports[1])}
	}
	ports, err := freePorts(7)
	if err != nil {
		return err
	}
	storage := filepath.Join(cp.dir, "source-storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		return err
	}
	if err := cp.run("source-controller", env, append(common(ports[0:2]),
		"--storage-path="+storage,
		fmt.Sprintf("--storage-addr=127.0.0.1:%d", ports[6]),
		fmt.Sprintf("--storage-adv-addr=127.0.0.1:%d", ports[6]))...); err != nil {
		return err
	}
	if err := cp.run("kustomize-controller", env, append(common(ports[2:4]), o.KustomizeFlags...)...); err != nil {
		return err
	}
	return cp.run("helm-controller", env, append(common(ports[4:6]), o.HelmFlags...)...)
}

// run starts one binary with its output in <dir>/<name>.log.
func (cp *ControlPlane) run(name string, env []string, args ...string) error {
	logPath := filepath.Join(cp.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(cp.bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test or bench that started it, even when that one
	// is killed and its cleanup never runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	pr := &proc{name: name, cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() {
		pr.done <- cmd.Wait()
		close(pr.done)
		f.Close()
	}()
	cp.procs = append(cp.procs, pr)
	return nil
}

// waitReady waits for the API server's /readyz.
func (cp *ControlPlane) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last error
	for {
		for _, p := range cp.procs {
			select {
			case err := <-p.done:
				return fmt.Errorf("%s exited (%v) before the API server was ready:\n%s", p.name, err, cp.Logs(p.name, 3000))
			default:
			}
		}
		body, err := cp.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server was not ready within 90s: %v\n%s", last, cp.Logs("kube-apiserver", 3000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Logs returns the last n bytes of a component's output.
func (cp *ControlPlane) Logs(name string, n int) string {
	b, err := os.ReadFile(filepath.Join(cp.dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Close stops every component, the controllers first.
func (cp *ControlPlane) Close() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		loopback.Stop(p.cmd, p.done, 10*time.Second)
	}
	cp.procs = nil
}

// freePorts is n ports of loopback.FreePort, which never hands out one
// twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := loopback.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// ServeDir serves a folder over HTTP on loopback until ctx ends (a Helm
// repository, for one). It returns the base URL.
func ServeDir(ctx context.Context, dir string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return "http://" + ln.Addr().String(), nil
}

// CPU returns the processor time each running component has used so far
// (user and system, every thread), by name: the bench's cost of a change
// is the difference of two readings. A component whose /proc entry cannot
// be read is left out.
func (cp *ControlPlane) CPU() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, c := range cp.procs {
		if c.cmd.Process == nil {
			continue
		}
		if t, err := cputime.Of(c.cmd.Process.Pid); err == nil {
			out[c.name] = t.Self
		}
	}
	return out
}
