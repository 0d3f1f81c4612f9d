package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelpAndErrors(t *testing.T) {
	env := func(string) string { return "" }
	tests := []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"--help"}, 0, "Commands:", ""},
		{[]string{"help"}, 0, "run ", ""},
		{[]string{"run", "--help"}, 0, "GIT_TOKEN_FILE", ""},
		{[]string{"run", "-h"}, 0, "-onboarding-queue", ""},
		{nil, 2, "", "Usage"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"run"}, 2, "", "GIT_REPO_URL is required"},
		{[]string{"run", "extra"}, 2, "", "unexpected arguments"},
		{[]string{"run", "--no-such-flag"}, 2, "", "not defined"},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		code := Main(tt.args, &out, &errOut, env)
		if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errOut.String(), tt.err) {
			t.Errorf("%v: code %d\nstdout %s\nstderr %s", tt.args, code, out.String(), errOut.String())
		}
	}
}

func TestTokenNeverAFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Main([]string{"run", "--git-token", "x"}, &out, &errOut, func(string) string { return "" }); code != 2 {
		t.Fatalf("--git-token accepted (code %d)", code)
	}
}
