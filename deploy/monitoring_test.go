package deploy_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
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
		"TenantWorkerLockWaitHigh", "TenantWorkerRetriesClimbing"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
	checkRuleMetrics(t, exprs)
}
