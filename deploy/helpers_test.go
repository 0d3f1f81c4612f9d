// Package deploy_test checks every deploy file for real: the Helm chart is
// rendered with the Helm SDK and decoded strictly into the Kubernetes,
// Prometheus Operator and KEDA types, the Flux manifests are built with
// kustomize, the Terraform is parsed with HCL, the IAM policy is compared
// with the SQS calls the code can make, docker-compose.yaml is loaded with
// compose-go and the Dockerfile's build command is run.
package deploy_test

import (
	"bytes"
	"flag"
	"io"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tenant-worker/tenant-worker/internal/config"
)

// object is one decoded manifest: its kind and name, and its YAML.
type object struct {
	APIVersion string
	Kind       string
	Name       string
	YAML       []byte
}

// splitManifests cuts a multi-document YAML stream into objects, skipping
// empty documents.
func splitManifests(t *testing.T, source string, data []byte) []object {
	t.Helper()
	var objs []object
	for _, doc := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("%s: %v\n%s", source, err, doc)
		}
		if head.Kind == "" || head.Metadata.Name == "" {
			t.Fatalf("%s: a document without kind or name:\n%s", source, doc)
		}
		objs = append(objs, object{APIVersion: head.APIVersion, Kind: head.Kind, Name: head.Metadata.Name, YAML: doc})
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

// strict decodes o into v, refusing unknown fields.
func strict(t *testing.T, o object, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.YAML, v); err != nil {
		t.Fatalf("%s %s does not decode strictly: %v\n%s", o.Kind, o.Name, err, o.YAML)
	}
}

// decodeAll decodes each object strictly into a new value of the type its
// kind maps to: slots maps a kind to a pointer to a typed pointer (such as
// **appsv1.Deployment), which is set. An unknown kind fails the test.
func decodeAll(t *testing.T, objs []object, slots map[string]any) {
	t.Helper()
	for _, o := range objs {
		slot, ok := slots[o.Kind]
		if !ok {
			t.Errorf("unexpected %s %s", o.Kind, o.Name)
			continue
		}
		field := reflect.ValueOf(slot).Elem()
		v := reflect.New(field.Type().Elem())
		strict(t, o, v.Interface())
		field.Set(v)
	}
}

// workerEnv lists the environment variables the worker reads for its
// settings, minus GIT_TOKEN: deploy files pass the token as a file.
func workerEnv() []string {
	var names []string
	for _, n := range config.EnvNames() {
		if n != "GIT_TOKEN" {
			names = append(names, n)
		}
	}
	return names
}

// checkSettings fails unless env sets every setting the worker reads, and
// the worker accepts them all.
func checkSettings(t *testing.T, where string, env map[string]string) config.Options {
	t.Helper()
	for _, n := range workerEnv() {
		if _, ok := env[n]; !ok {
			t.Errorf("%s does not set %s", where, n)
		}
	}
	if _, ok := env["GIT_TOKEN"]; ok {
		t.Errorf("%s sets GIT_TOKEN: the token must come from a file", where)
	}
	o := config.Default()
	fs := flag.NewFlagSet(where, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.Bind(fs, func(k string) string { return env[k] })
	if err := o.Validate(); err != nil {
		t.Errorf("the worker refuses the settings of %s: %v", where, err)
	}
	return o
}
