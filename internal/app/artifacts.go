package app

import (
	"context"
	"errors"

	"github.com/go-git/go-git/v5/plumbing"
	"k8s.io/client-go/dynamic"

	wconfig "github.com/tenant-worker/tenant-worker/internal/config"
	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/publish"
)

// artifacts makes the publisher of ARTIFACT_URL, or nil without it.
func artifacts(o wconfig.Options) (*publish.Publisher, error) {
	if o.ArtifactURL == "" {
		return nil, nil
	}
	cfg, err := flux.LoadConfig(o.Kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, errors.New("ARTIFACT_URL needs cluster access: KUBECONFIG, or run in a pod")
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var template string
	if ks := o.Kustomizations(); len(ks) > 0 {
		template = ks[0]
	}
	return publish.New(publish.Options{Layout: gitops.Layout{Root: o.GitopsRoot}, Namespace: o.FluxNamespace,
		URL: o.ArtifactURL, Client: dyn, Branch: o.GitBranch, Template: template, Interval: o.ArtifactInterval}), nil
}

// rebuildFrom lets the publisher build again, from p's clone, an archive
// another replica published.
func rebuildFrom(p *pipeline.Pipeline) func(ctx context.Context, commit string, fn func(publish.Source) error) error {
	return func(ctx context.Context, commit string, fn func(publish.Source) error) error {
		h := plumbing.NewHash(commit)
		if h.String() != commit {
			return errors.New("not a commit")
		}
		return p.ReadAt(ctx, h, func(r gitops.Reader) error {
			src, ok := r.(publish.Source)
			if !ok {
				return errors.New("the branch is not a git snapshot")
			}
			return fn(src)
		})
	}
}
