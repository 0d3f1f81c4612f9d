package flux

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is an apiVersion and kind a manifest uses, with the file that uses it.
type Kind struct {
	APIVersion, Kind string
	File             string
}

// Unserved is a kind the cluster does not serve.
type Unserved struct {
	Kind
	// Fix names what would make it work, where known.
	Fix string
}

func (u Unserved) String() string {
	s := fmt.Sprintf("%s %s (in %s) is not served by the cluster", u.APIVersion, u.Kind.Kind, u.File)
	if u.Fix != "" {
		s += ": " + u.Fix
	}
	return s
}

// Unserved returns the kinds the cluster does not serve, asking discovery
// once per group version.
func (c *Client) Unserved(ctx context.Context, kinds []Kind) ([]Unserved, error) {
	served := map[string][]string{} // group version -> kinds
	var out []Unserved
	for _, k := range kinds {
		gv := k.APIVersion
		list, ok := served[gv]
		if !ok {
			res, err := c.disc.ServerResourcesForGroupVersion(gv)
			switch {
			case apierrors.IsNotFound(err):
				list = []string{}
			case err != nil:
				return nil, fmt.Errorf("discover %s: %w", gv, err)
			default:
				for _, r := range res.APIResources {
					if !strings.Contains(r.Name, "/") {
						list = append(list, r.Kind)
					}
				}
			}
			served[gv] = list
		}
		if !slices.Contains(list, k.Kind) {
			out = append(out, Unserved{Kind: k, Fix: c.fix(k)})
		}
	}
	return out, nil
}

// fix suggests the version the cluster serves for the kind's group.
func (c *Client) fix(k Kind) string {
	gv, err := schema.ParseGroupVersion(k.APIVersion)
	if err != nil {
		return ""
	}
	groups, err := c.disc.ServerGroups()
	if err != nil {
		return ""
	}
	for _, g := range groups.Groups {
		if g.Name != gv.Group {
			continue
		}
		for _, v := range g.Versions {
			res, err := c.disc.ServerResourcesForGroupVersion(v.GroupVersion)
			if err != nil {
				continue
			}
			for _, r := range res.APIResources {
				if r.Kind == k.Kind {
					return fmt.Sprintf("write apiVersion: %s in the templates (the cluster serves %s %s)", v.GroupVersion, k.Kind, v.Version)
				}
			}
		}
	}
	return "install the CRD or controller that serves it"
}
