package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/tenant-worker/tenant-worker/internal/metrics"
)

// TestAlertRules parses the alert rules with Prometheus's own rule parser
// and checks that every metric they use is one the worker exports.
func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile("monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	chartCopy, err := os.ReadFile(chartDir + "/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, chartCopy) {
		t.Fatal("monitoring/alerts.yaml and the chart's files/alerts.yaml differ; the first must link to the second")
	}
	groups, errs := rulefmt.Parse(data, false, model.UTF8Validation, parser.NewParser(parser.Options{}), nil)
	for _, err := range errs {
		t.Errorf("alerts.yaml: %v", err)
	}
	if len(errs) > 0 {
		return
	}
	var exprs []string
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			alerts[r.Alert] = true
			if r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alert %s has no summary or severity", r.Alert)
			}
		}
	}
	for _, a := range []string{"TenantWorkerDeadLetterQueueGrowing", "TenantWorkerNoPushWhileMessagesWait",
		"TenantWorkerLockWaitHigh", "TenantWorkerRetriesClimbing", "TenantWorkerTenantNotReady", "TenantWorkerTemplatesUnservedByCluster"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
	checkRuleMetrics(t, exprs)
}

// checkRuleMetrics parses each PromQL expression with Prometheus's parser
// and fails if it uses a metric the worker does not export.
func checkRuleMetrics(t *testing.T, exprs []string) {
	t.Helper()
	rec := &recorder{Registerer: prometheus.NewRegistry()}
	metrics.New(rec)
	have := map[string]bool{}
	for _, name := range rec.names {
		have[name] = true
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			have[name+s] = true
		}
	}
	p := parser.NewParser(parser.Options{})
	for _, e := range exprs {
		expr, err := p.ParseExpr(e)
		if err != nil {
			t.Errorf("%s: %v", e, err)
			continue
		}
		used := 0
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				used++
				if !have[vs.Name] {
					t.Errorf("%s uses %s, which the worker does not export", e, vs.Name)
				}
			}
			return nil
		})
		if used == 0 {
			t.Errorf("%s uses no metric", e)
		}
	}
}

// recorder notes the name of every metric registered through it.
type recorder struct {
	prometheus.Registerer
	names []string
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil {
				r.names = append(r.names, m[1])
			}
		}
	}
	r.Registerer.MustRegister(cs...)
}

// TestDashboard checks every query of the Grafana dashboard with
// Prometheus's parser against the worker's metrics.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string
		UID    string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatal("the dashboard has no uid or no panels")
	}
	// Grafana's variables, as Grafana fills them in.
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*")
	var exprs []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			exprs = append(exprs, vars.Replace(q.Expr))
		}
	}
	checkRuleMetrics(t, exprs)
}
