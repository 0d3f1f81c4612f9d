package render

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// sameExcept checks that after reads as before does, node for node (the
// same kinds, tags, values, anchors, and aliases to the same places), but
// that the scalars of before in wants now hold the value given there.
// Since no edited node is under an anchor used by an alias (unshared),
// after differs from before, aliases resolved, only at those values.
func sameExcept(before, after []*yaml.Node, wants map[*yaml.Node]string) error {
	if len(before) != len(after) {
		return fmt.Errorf("the file would have %d documents instead of %d", len(after), len(before))
	}
	at := func(docs []*yaml.Node) map[*yaml.Node]int {
		m := map[*yaml.Node]int{}
		var walk func(n *yaml.Node)
		walk = func(n *yaml.Node) {
			m[n] = len(m)
			for _, c := range n.Content {
				walk(c)
			}
		}
		for _, d := range docs {
			walk(d)
		}
		return m
	}
	bAt, aAt := at(before), at(after)
	var same func(b, a *yaml.Node) error
	same = func(b, a *yaml.Node) error {
		if want, set := wants[b]; set {
			if a.Kind != yaml.ScalarNode || a.Value != want || a.ShortTag() != b.ShortTag() || a.Anchor != b.Anchor {
				return fmt.Errorf("line %d would read %s %q, not %s %q", b.Line, a.ShortTag(), a.Value, b.ShortTag(), want)
			}
			return nil
		}
		if b.Kind != a.Kind || b.Anchor != a.Anchor || len(b.Content) != len(a.Content) ||
			(b.Kind != yaml.AliasNode && b.ShortTag() != a.ShortTag()) ||
			(b.Kind == yaml.ScalarNode && b.Value != a.Value) ||
			(b.Kind == yaml.AliasNode && bAt[b.Alias] != aAt[a.Alias]) {
			return fmt.Errorf("line %d would change too", b.Line)
		}
		for i := range b.Content {
			if err := same(b.Content[i], a.Content[i]); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range before {
		if err := same(before[i], after[i]); err != nil {
			return err
		}
	}
	return nil
}
