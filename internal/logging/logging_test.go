package logging

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestRedactsSecrets(t *testing.T) {
	var buf bytes.Buffer
	log, err := New(&buf, "debug", "json", "hunter2", "")
	if err != nil {
		t.Fatal(err)
	}
	log.Error().Err(errors.New("auth failed for https://admin:hunter2@host/x")).Str("k", "hunter2").Msg("hunter2 here")
	out := buf.String()
	if strings.Contains(out, "hunter2") || strings.Count(out, "[REDACTED]") != 3 {
		t.Fatalf("not redacted: %s", out)
	}
	buf.Reset()
	console, _ := New(&buf, "info", "console", "hunter2")
	console.Info().Str("token", "hunter2").Str("body", "\x1b[31mred\x1b]0;title\x07").Msg("x")
	if strings.Contains(buf.String(), "hunter2") {
		t.Fatalf("console not redacted: %s", buf.String())
	}
	if strings.ContainsAny(buf.String(), "\x1b\x07") {
		t.Fatalf("console passes terminal escapes: %q", buf.String())
	}
	if _, err := New(&buf, "loud", "json"); err == nil {
		t.Fatal("bad level accepted")
	}
}
