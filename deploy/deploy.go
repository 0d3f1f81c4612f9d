// Package deploy holds what is shipped to run tenant-worker (the chart,
// Flux's objects, Terraform, compose) and checks it in its tests; its Go
// code reads what tests elsewhere need of those files.
package deploy

import (
	_ "embed"
	"fmt"

	"sigs.k8s.io/yaml"
)

//go:embed flux/kustomize-controller/kustomization.yaml
var kustomizeController []byte

//go:embed flux/helm-controller/kustomization.yaml
var helmController []byte

// KustomizeControllerFlags are the arguments deploy/flux/kustomize-controller
// adds to kustomize-controller for shard folders with Kustomizations of
// their own: tests and benchmarks run it with them, so the component
// shipped is the one tested.
func KustomizeControllerFlags() ([]string, error) {
	return componentFlags("deploy/flux/kustomize-controller", kustomizeController)
}

// HelmControllerFlags are the arguments deploy/flux/helm-controller adds
// to helm-controller: the benchmarks of the time to live run it with them.
func HelmControllerFlags() ([]string, error) {
	return componentFlags("deploy/flux/helm-controller", helmController)
}

// componentFlags are the arguments a component of name adds to its
// Deployment's first container, refusing any other operation.
func componentFlags(name string, component []byte) ([]string, error) {
	var c struct {
		Patches []struct {
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	if err := yaml.Unmarshal(component, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	var flags []string
	for _, p := range c.Patches {
		var ops []struct {
			Op, Path string
			Value    string
		}
		if err := yaml.Unmarshal([]byte(p.Patch), &ops); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, op := range ops {
			if op.Op != "add" || op.Path != "/spec/template/spec/containers/0/args/-" {
				return nil, fmt.Errorf("%s: an operation other than adding an argument: %s %s", name, op.Op, op.Path)
			}
			flags = append(flags, op.Value)
		}
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("%s adds no argument", name)
	}
	return flags, nil
}
