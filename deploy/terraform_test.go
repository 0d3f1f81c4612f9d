package deploy_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/tenant-worker/tenant-worker/internal/queue"
)

// sqsActions derives the IAM actions the worker needs from the code:
// queue.API is every SQS call the worker can make. SQS authorises a batch
// call as its single-message action.
func sqsActions() []string {
	api := reflect.TypeFor[queue.API]()
	var actions []string
	for i := range api.NumMethod() {
		a := "sqs:" + strings.TrimSuffix(api.Method(i).Name, "Batch")
		if !slices.Contains(actions, a) {
			actions = append(actions, a)
		}
	}
	sort.Strings(actions)
	return actions
}

type policyDoc struct {
	Version   string
	Statement []struct {
		Sid      string
		Effect   string
		Action   []string
		Resource []string
	}
}

func readPolicy(t *testing.T) (policyDoc, []byte) {
	t.Helper()
	data, err := os.ReadFile("iam/policy.json")
	if err != nil {
		t.Fatal(err)
	}
	var p policyDoc
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("iam/policy.json: %v", err)
	}
	return p, data
}

// TestIAMPolicyIsLeastPrivilege: every SQS action the code calls is granted
// and nothing more; sending only to dead-letter queues, consuming only from
// the source queues.
func TestIAMPolicyIsLeastPrivilege(t *testing.T) {
	p, _ := readPolicy(t)
	if p.Version != "2012-10-17" {
		t.Errorf("policy version %q", p.Version)
	}
	granted := map[string]bool{}
	for _, s := range p.Statement {
		if s.Effect != "Allow" {
			t.Errorf("statement %s: effect %s", s.Sid, s.Effect)
		}
		// Queues the worker only writes to: dead-letter queues, and the
		// results queue.
		sinks := 0
		for _, r := range s.Resource {
			if !strings.HasPrefix(r, "arn:aws:sqs:") || strings.Contains(r, "*") {
				t.Errorf("statement %s: resource %q is not one queue", s.Sid, r)
			}
			if strings.HasSuffix(r, "-dlq") || strings.HasSuffix(r, ":${results_queue}") {
				sinks++
			}
		}
		if sinks != 0 && sinks != len(s.Resource) {
			t.Errorf("statement %s mixes source queues with dead-letter or results queues", s.Sid)
		}
		for _, a := range s.Action {
			granted[a] = true
			onSink := sinks > 0
			switch a {
			case "sqs:SendMessage":
				if !onSink {
					t.Errorf("statement %s grants send on a source queue", s.Sid)
				}
			case "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility":
				if onSink {
					t.Errorf("statement %s grants %s on a dead-letter or results queue", s.Sid, a)
				}
			}
		}
	}
	var got []string
	for a := range granted {
		got = append(got, a)
	}
	sort.Strings(got)
	if want := sqsActions(); !slices.Equal(got, want) {
		t.Errorf("the policy grants %v; the code calls %v", got, want)
	}
}

// TestTerraform parses deploy/terraform with HCL, checks that every
// variable used is declared, that the queues have dead-letter queues with a
// redrive policy and the IRSA role trusts the cluster's OIDC provider, and
// that the role's policy is deploy/iam/policy.json with every placeholder
// filled.
func TestTerraform(t *testing.T) {
	files, err := filepath.Glob("terraform/*.tf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no Terraform files: %v", err)
	}
	parser := hclparse.NewParser()
	declared := map[string]bool{}
	resources := map[string]*hclsyntax.Block{}
	var bodies []*hclsyntax.Body
	for _, f := range files {
		file, diags := parser.ParseHCLFile(f)
		if diags.HasErrors() {
			t.Fatalf("%s: %s", f, diags.Error())
		}
		body := file.Body.(*hclsyntax.Body)
		bodies = append(bodies, body)
		for _, b := range body.Blocks {
			switch b.Type {
			case "variable":
				declared[b.Labels[0]] = true
				if _, ok := b.Body.Attributes["description"]; !ok {
					t.Errorf("variable %s has no description", b.Labels[0])
				}
			case "resource", "data":
				resources[b.Type+"."+strings.Join(b.Labels, ".")] = b
			}
		}
	}
	for _, v := range []string{"cluster_oidc_provider_arn", "cluster_oidc_issuer_url", "onboarding_queue_name",
		"offboarding_queue_name", "deployment_queue_name", "namespace", "service_account"} {
		if !declared[v] {
			t.Errorf("no variable %s", v)
		}
	}
	for _, body := range bodies {
		_ = hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
			if e, ok := n.(hclsyntax.Expression); ok {
				for _, tr := range e.Variables() {
					if tr.RootName() == "var" {
						name := tr[1].(hcl.TraverseAttr).Name
						if !declared[name] {
							t.Errorf("var.%s is used but not declared", name)
						}
					}
				}
			}
			return nil
		})
	}

	src := func(b *hclsyntax.Block, attr string) string {
		a, ok := b.Body.Attributes[attr]
		if !ok {
			t.Fatalf("%s has no %s", b.Labels, attr)
		}
		r := a.Expr.Range()
		data, _ := os.ReadFile(r.Filename)
		return string(r.SliceBytes(data))
	}
	for _, name := range []string{"resource.aws_sqs_queue.tenant", "resource.aws_sqs_queue.dead_letter",
		"resource.aws_iam_role.worker", "resource.aws_iam_role_policy.worker", "data.aws_iam_policy_document.assume"} {
		if resources[name] == nil {
			t.Fatalf("no %s", name)
		}
	}
	if s := src(resources["resource.aws_sqs_queue.tenant"], "redrive_policy"); !strings.Contains(s, "aws_sqs_queue.dead_letter[each.key].arn") ||
		!strings.Contains(s, "maxReceiveCount") {
		t.Errorf("the tenant queues' redrive policy does not name their dead-letter queue: %s", s)
	}
	if s := src(resources["resource.aws_sqs_queue.dead_letter"], "name"); s != `"${each.value}-dlq"` {
		t.Errorf("dead-letter queue names %s do not match the policy's <queue>-dlq", s)
	}
	assume := resources["data.aws_iam_policy_document.assume"]
	var trust []string
	_ = hclsyntax.VisitAll(assume.Body, func(n hclsyntax.Node) hcl.Diagnostics {
		if a, ok := n.(*hclsyntax.Attribute); ok {
			r := a.Expr.Range()
			data, _ := os.ReadFile(r.Filename)
			trust = append(trust, string(r.SliceBytes(data)))
		}
		return nil
	})
	joined := strings.Join(trust, "\n")
	for _, want := range []string{"sts:AssumeRoleWithWebIdentity", "var.cluster_oidc_provider_arn", ":sub",
		"system:serviceaccount:${var.namespace}:${var.service_account}", ":aud", "sts.amazonaws.com"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the IRSA trust policy lacks %q", want)
		}
	}

	// The role policy: templatefile(<path>, {vars}) of deploy/iam/policy.json.
	policy := resources["resource.aws_iam_role_policy.worker"].Body.Attributes["policy"]
	call, ok := policy.Expr.(*hclsyntax.FunctionCallExpr)
	if !ok || call.Name != "templatefile" || len(call.Args) != 2 {
		t.Fatalf("the role policy is not templatefile(path, vars)")
	}
	pathVal, diags := call.Args[0].Value(&hcl.EvalContext{Variables: map[string]cty.Value{
		"path": cty.ObjectVal(map[string]cty.Value{"module": cty.StringVal("terraform")}),
	}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if filepath.Clean(pathVal.AsString()) != filepath.Clean("iam/policy.json") {
		t.Errorf("the role policy is %s, not deploy/iam/policy.json", pathVal.AsString())
	}
	obj, ok := call.Args[1].(*hclsyntax.ObjectConsExpr)
	if !ok {
		t.Fatal("templatefile vars are not an object")
	}
	vars := map[string]bool{}
	for _, item := range obj.Items {
		vars[hcl.ExprAsKeyword(item.KeyExpr)] = true
	}
	_, data := readPolicy(t)
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{(\w+)\}`).FindAllStringSubmatch(string(data), -1) {
		used[m[1]] = true
		if !vars[m[1]] {
			t.Errorf("policy.json uses ${%s}, which Terraform does not fill", m[1])
		}
	}
	for v := range vars {
		if !used[v] {
			t.Errorf("Terraform passes %s, which policy.json does not use", v)
		}
	}
}
