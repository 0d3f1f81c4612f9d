package served

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/metrics"
	"github.com/tenant-worker/tenant-worker/internal/runs"
	"github.com/tenant-worker/tenant-worker/internal/testenv/memtree"
)

type fakeCluster func(kinds []flux.Kind) ([]flux.Unserved, error)

func (f fakeCluster) Unserved(_ context.Context, kinds []flux.Kind) ([]flux.Unserved, error) {
	return f(kinds)
}

type fakeTemplates func(fn func(r gitops.Reader) error) error

func (f fakeTemplates) Read(_ context.Context, fn func(r gitops.Reader) error) error { return f(fn) }

func TestWhatTheClusterDoesNotServeIsReportedUntilItDoes(t *testing.T) {
	ctx := zerolog.Nop().WithContext(context.Background())
	tree := memtree.Tree{"tier-templates/premium_tenant_template.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: '{TENANT_ID}'\n"}
	asked, serves := 0, false
	var reported []string
	m := metrics.New(prometheus.NewRegistry())
	rec := runs.New(10)
	w := &Watcher{
		Templates: fakeTemplates(func(fn func(r gitops.Reader) error) error { return fn(tree) }),
		Cluster: fakeCluster(func(kinds []flux.Kind) ([]flux.Unserved, error) {
			asked++
			if serves {
				return nil, nil
			}
			return []flux.Unserved{{Kind: kinds[0], Fix: "install the Widget CRD"}}, nil
		}),
		Metrics: m, Runs: rec,
		OnReport: func(p string) { reported = append(reported, p) },
	}
	if err := w.check(ctx); err != nil {
		t.Fatal(err)
	}
	if len(reported) != 1 || !strings.Contains(reported[0], "example.com/v1 Widget") || !strings.Contains(reported[0], "install the Widget CRD") {
		t.Fatalf("reported %q", reported)
	}
	if rec.Status().Warning != reported[0] || testutil.ToFloat64(m.UnservedKinds) != 1 {
		t.Fatalf("warning %q, metric %v", rec.Status().Warning, testutil.ToFloat64(m.UnservedKinds))
	}
	// The same kinds within a minute: the cluster is not asked again.
	if err := w.check(ctx); err != nil || asked != 1 {
		t.Fatalf("check = %v after %d questions, want 1", err, asked)
	}
	// The templates changed (the CRD was installed meanwhile): asked again.
	serves = true
	tree["pooled-envs/shared.yaml"] = "apiVersion: v1\nkind: ConfigMap\n"
	if err := w.check(ctx); err != nil || asked != 2 {
		t.Fatalf("check = %v after %d questions, want 2", err, asked)
	}
	if reported[len(reported)-1] != "" || rec.Status().Warning != "" || testutil.ToFloat64(m.UnservedKinds) != 0 {
		t.Fatalf("after the fix: reported %q, warning %q", reported, rec.Status().Warning)
	}
}

func TestAFailedReadIsAnErrorAndNoReport(t *testing.T) {
	w := &Watcher{
		Templates: fakeTemplates(func(func(r gitops.Reader) error) error { return errors.New("clone busy") }),
		OnReport:  func(string) { t.Fatal("reported without a check") },
	}
	if err := w.check(context.Background()); err == nil || !strings.Contains(err.Error(), "clone busy") {
		t.Fatalf("check = %v", err)
	}
}

func TestRunReturnsWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(zerolog.Nop().WithContext(context.Background()))
	w := &Watcher{Templates: fakeTemplates(func(func(r gitops.Reader) error) error {
		cancel()
		return context.Canceled
	})}
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return when its context ended")
	}
}
