package main

import "testing"

// TestFormatCommand: the headline rows cite the command that repeats the
// run, as a shell reads it.
func TestFormatCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "make bench"},
		{[]string{"-only", "ledger", "-ledger-shards", "100"}, "go run ./cmd/bench -only ledger -ledger-shards 100"},
		{[]string{"-live-kustomize-flags", "--concurrent-ssa=8 --kube-api-qps=1000"}, "go run ./cmd/bench -live-kustomize-flags '--concurrent-ssa=8 --kube-api-qps=1000'"},
		{[]string{"-reference-script", "it's.sh"}, `go run ./cmd/bench -reference-script 'it'\''s.sh'`},
	} {
		if got := command(tc.args); got != tc.want {
			t.Errorf("command(%q) = %s, want %s", tc.args, got, tc.want)
		}
	}
}
