package render

import (
	"regexp"
	"strings"
)

// ReleaseOf reads back, from a file rendered from tmpl for v's names, the
// release its values hold: the inverse of SetRelease on the same fields.
// It reports false when the template sets no value from the release, when
// a field is missing or does not have the template's form, or when two
// fields disagree.
func ReleaseOf(current, tmpl []byte, v Vars) (string, bool) {
	v.ReleaseVersion = releaseSentinel
	probe, err := Render(tmpl, v)
	if err != nil {
		return "", false
	}
	fields, err := releaseFields(probe)
	if err != nil || len(fields) == 0 {
		return "", false
	}
	docs, err := parse(current)
	if err != nil {
		return "", false
	}
	release := ""
	for _, f := range fields {
		doc, err := find(docs, f.obj)
		if err != nil {
			return "", false
		}
		parts := strings.Split(f.value, releaseSentinel)
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		m := regexp.MustCompile("^" + strings.Join(parts, `([0-9]+\.[0-9]+)`) + "$").FindStringSubmatch(get(doc, f.path...))
		if m == nil {
			return "", false
		}
		for _, r := range m[1:] {
			if release != "" && r != release {
				return "", false
			}
			release = r
		}
	}
	return release, release != ""
}
