package deploy_test

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string
	Args string
}

func readDockerfile(t *testing.T) []instruction {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cur += line
		cmd, args, _ := strings.Cut(cur, " ")
		out = append(out, instruction{Cmd: strings.ToUpper(cmd), Args: strings.Join(strings.Fields(args), " ")})
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDockerfile checks the image's shape and runs its build command: the
// same `make build` a workstation runs, which must give a static binary
// that answers --help here.
func TestDockerfile(t *testing.T) {
	var froms, runs []string
	var user, entrypoint string
	stage := 0
	for _, in := range readDockerfile(t) {
		switch in.Cmd {
		case "FROM":
			stage++
			froms = append(froms, in.Args)
		case "RUN":
			if stage == 1 {
				runs = append(runs, in.Args)
			} else {
				t.Errorf("RUN in the runtime stage: %s", in.Args)
			}
		case "USER":
			user = in.Args
		case "ENTRYPOINT":
			entrypoint = in.Args
		}
	}
	if len(froms) != 2 {
		t.Fatalf("want a build and a runtime stage, got FROM %v", froms)
	}
	for _, f := range froms {
		image := strings.Fields(f)[0]
		if !regexp.MustCompile(`^[\w./-]+:[\w.-]+(@sha256:[0-9a-f]{64})?$`).MatchString(image) || strings.HasSuffix(image, ":latest") {
			t.Errorf("base image %q is not pinned", image)
		}
	}
	if !strings.HasPrefix(froms[1], "gcr.io/distroless/static") || user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("runtime image %q as user %q: want distroless static (CA certificates, no shell) as non-root", froms[1], user)
	}
	if !strings.Contains(entrypoint, "/usr/local/bin/tenant-worker") {
		t.Errorf("entrypoint %s", entrypoint)
	}
	build := runs[len(runs)-1]
	if build != "make build" {
		t.Fatalf("the Dockerfile builds with %q, not `make build`", build)
	}

	// Run the Dockerfile's build command, into a temporary bin directory.
	bin := t.TempDir()
	args := append(strings.Fields(build), "BIN="+bin)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	path := filepath.Join(bin, "tenant-worker")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary needs a dynamic loader: not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary links %v: not static", libs)
	}
	if f.Section(".debug_info") != nil {
		t.Error("the binary carries debug info (-s -w missing)")
	}
	for _, a := range [][]string{{"--help"}, {"run", "--help"}} {
		out, err := exec.Command(path, a...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "run") {
			t.Errorf("tenant-worker %s: %v\n%s", strings.Join(a, " "), err, out)
		}
	}
	// -trimpath: no path of this machine in the binary.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if wd, _ := filepath.Abs(".."); strings.Contains(string(data), wd) {
		t.Errorf("the binary contains the build path %s (-trimpath missing)", wd)
	}
}
