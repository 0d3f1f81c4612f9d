package flux

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// listAbove is how many HelmReleases of one namespace are read with one
// list rather than one get each.
const listAbove = 16

// Generations reads the metadata.generation of the HelmReleases named
// namespace/name from the API server itself, not from the watches: a
// reading made after a Kustomization was seen to apply a commit has the
// generation that apply made, or a later one, whatever the watch of
// HelmReleases has delivered so far. One that does not exist is left out.
func (c *Client) Generations(ctx context.Context, keys []string) (map[string]int64, error) {
	byNS := map[string][]string{}
	for _, k := range keys {
		ns, name, ok := strings.Cut(k, "/")
		if !ok {
			return nil, fmt.Errorf("HelmRelease %q: not namespace/name", k)
		}
		byNS[ns] = append(byNS[ns], name)
	}
	out := map[string]int64{}
	namespaces := make([]string, 0, len(byNS))
	for ns := range byNS {
		namespaces = append(namespaces, ns)
	}
	slices.Sort(namespaces)
	for _, ns := range namespaces {
		names := byNS[ns]
		res := c.dyn.Resource(HelmReleases).Namespace(ns)
		if len(names) > listAbove {
			list, err := res.List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("list HelmReleases in %s: %w", ns, err)
			}
			wanted := make(map[string]bool, len(names))
			for _, n := range names {
				wanted[n] = true
			}
			for _, hr := range list.Items {
				if wanted[hr.GetName()] {
					out[ns+"/"+hr.GetName()] = hr.GetGeneration()
				}
			}
			continue
		}
		for _, name := range names {
			hr, err := res.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("get HelmRelease %s/%s: %w", ns, name, err)
			}
			out[ns+"/"+name] = hr.GetGeneration()
		}
	}
	return out, nil
}
