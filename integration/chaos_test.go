package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// fault is a fault the fault run injects at a point of the git protocol,
// never at a moment of the wall clock: the git server's hook counts the
// workers' pushes and acts on chosen ones.
type fault string

const (
	// The worker is SIGKILLed while the server holds its push, before git
	// sees it: the branch does not move, the messages come back.
	faultKillHeld fault = "sigkill_push_held"
	// git updates the branch, then the worker is SIGKILLed before it hears
	// so: its messages come back and must be recognised as applied.
	faultKillAfterUpdate fault = "sigkill_after_branch_moved"
	// Another writer commits just before git receives the push: a lost race.
	faultRace fault = "lost_race"
	// The other writer (image automation, a person) commits just before git
	// receives the push, on every fifth push: a note no plan reads, which
	// the worker rebases over without planning again, or a YAML file
	// outside the tiers, which every onboarding's collision check reads,
	// so its batch is decided again. It goes on past the plan's pushes, into
	// the offboardings and the whole-tier deployments.
	faultWriterNote fault = "other_writer_note"
	faultWriterYAML fault = "other_writer_yaml"
	// A second replica starts, and later stops with SIGTERM.
	faultReplicaStart fault = "replica_started"
	faultReplicaStop  fault = "replica_stopped"
	// The server answers HTTP 500 without touching the branch.
	fault500 fault = "http_500"
	// The server holds a push past the worker's git timeout (8 s).
	faultStall fault = "stall_past_timeout"
	// The repository is renamed: from then on its old URL answers 301, and
	// the push that found it so must land at the new one.
	faultRename fault = "repository_renamed"
	// The server holds a push until the worker renews the visibility of
	// its messages (the heartbeat); the SQS proxy holds that call and the
	// worker is SIGKILLed in it.
	faultKillHeartbeat fault = "sigkill_during_heartbeat"
)

// renamedTo is the repository's name after faultRename.
const renamedTo = "gitops-renamed.git"

// faultPlan is what happens at which push of the workers (counted from 1).
// Every fault lies within the first 120 pushes, which phase 1 always needs.
var faultPlan = map[int64]fault{
	4: faultKillHeld, 12: faultReplicaStart, 18: faultKillAfterUpdate, 26: faultRace,
	33: faultKillHeld, 41: faultKillAfterUpdate, 48: faultRace, 56: faultKillHeld,
	64: faultKillAfterUpdate, 68: faultRename, 72: faultReplicaStop, 76: faultKillHeartbeat, 80: faultRace,
	88: faultKillHeartbeat,
}

// plannedFaults counts the faults every run must inject: the plan's, HTTP
// 500 on every push numbered 7 mod 10 and a stall on every 40th, up to push
// 100, and the other writer's up to push 120 (at least: it goes on).
func plannedFaults() map[fault]int {
	want := map[fault]int{}
	for _, f := range faultPlan {
		want[f]++
	}
	for n := int64(1); n <= 120; n++ {
		switch {
		case writer(n) != "":
			want[writer(n)]++
		case !regular(n):
		case n%10 == 7:
			want[fault500]++
		default:
			want[faultStall]++
		}
	}
	return want
}

// openEnded are the faults injected past the plan's pushes too: a run has
// at least the planned number.
var openEnded = map[fault]bool{faultWriterNote: true, faultWriterYAML: true}

// writer is the other writer's commit at push n, if any: on every push
// numbered 3 mod 5 that nothing else is planned for, a YAML file on every
// third of them and a note on the others.
func writer(n int64) fault {
	if _, planned := faultPlan[n]; planned || n%5 != 3 || regular(n) {
		return ""
	}
	if n/5%3 == 2 {
		return faultWriterYAML
	}
	return faultWriterNote
}

// regular reports whether push n gets one of the regular faults: HTTP 500
// on pushes numbered 7 mod 10, a stall on every 40th, up to push 100, where
// the plan has nothing else.
func regular(n int64) bool {
	_, planned := faultPlan[n]
	return !planned && n <= 100 && (n%10 == 7 || n%40 == 0)
}

// chaos runs the workers of the fault run and injects the faults.
type chaos struct {
	h    *harness
	logs *syncBuffer
	env  []string

	pushes  atomic.Int64 // pushes by workers that reached the server
	foreign atomic.Int64 // commits by another writer on the branch

	mu      sync.Mutex
	procs   map[string]*process // by git user name
	replica string              // the second replica's name, while it runs
	seq     int
	carried []fault // faults moved to a later push
	renamed bool    // a push reached the renamed repository
	// heartbeat is the worker whose next heartbeat is to be killed, and
	// beaten is closed once it was.
	heartbeat string
	beaten    chan struct{}
	sqsProxy  *httptest.Server
	// kills are the messages each SIGKILL left in hand, and when.
	kills    []killed
	injected map[fault]int
	observed map[fault]int
	wg       sync.WaitGroup
	stopping bool
	errs     []error
}

func newChaos(h *harness, logs *syncBuffer, env []string) *chaos {
	c := &chaos{h: h, logs: logs, env: env, procs: map[string]*process{},
		injected: map[fault]int{}, observed: map[fault]int{}}
	target, err := url.Parse(sqsEndpoint)
	if err != nil {
		h.t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	c.sqsProxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.sqsHook(w, r) {
			proxy.ServeHTTP(w, r)
		}
	}))
	h.t.Cleanup(c.sqsProxy.Close)
	return c
}

// heartbeatRE matches a visibility change to the full 5 s timeout: the
// heartbeat (a retry asks 1-2 s, a release 0).
var heartbeatRE = regexp.MustCompile(`"VisibilityTimeout":\s*5\b`)

// sqsHook sees every SQS call of the workers; it returns false when it
// answered the call itself.
func (c *chaos) sqsHook(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("X-Amz-Target") != "AmazonSQS.ChangeMessageVisibilityBatch" {
		return true
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	c.mu.Lock()
	armed, beaten := c.heartbeat, c.beaten
	if armed == "" || !strings.Contains(r.Header.Get("Authorization"), "Credential="+armed+"/") || !heartbeatRE.Match(body) {
		c.mu.Unlock()
		return true
	}
	c.heartbeat = ""
	c.mu.Unlock()
	c.count(faultKillHeartbeat, c.kill(armed))
	close(beaten)
	http.Error(w, "worker killed during its heartbeat", http.StatusBadGateway)
	return false
}

// start runs the first worker.
func (c *chaos) start() {
	c.h.t.Helper()
	if err := c.spawn(false); err != nil {
		c.h.t.Fatal(err)
	}
}

// spawn starts a worker under a new git user name.
func (c *chaos) spawn(replica bool) error {
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		return nil
	}
	c.seq++
	name := fmt.Sprintf("worker-%d", c.seq)
	c.mu.Unlock()
	// Each keeps its clone in memory (the default), so a restart clones
	// again. It talks to SQS through the proxy, under its own access key.
	env := append([]string{"GIT_USERNAME=" + name}, c.env...)
	env = append(env, "AWS_ENDPOINT_URL_SQS="+c.sqsProxy.URL, "AWS_ACCESS_KEY_ID="+name)
	p, err := c.h.launch("", c.logs, env...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs[name] = p
	if replica {
		c.replica = name
	}
	return nil
}

// background runs fn beside the git request that triggered it; an error is
// reported when the run ends.
func (c *chaos) background(fn func() error) {
	c.wg.Go(func() {
		if err := fn(); err != nil {
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
		}
	})
}

func (c *chaos) count(f fault, observed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.injected[f]++
	if observed {
		c.observed[f]++
	}
}

// injectedCount is how many times f was injected.
func (c *chaos) injectedCount(f fault) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.injected[f]
}

// kill SIGKILLs the worker that pushes as user and waits for it to exit;
// it reports whether it did. A replacement starts in the background.
func (c *chaos) kill(user string) bool {
	c.mu.Lock()
	p := c.procs[user]
	delete(c.procs, user)
	replica := user == c.replica
	if replica {
		c.replica = ""
	}
	c.mu.Unlock()
	if p == nil {
		return false
	}
	var addr string
	for _, l := range p.logs.lines("message", "serving the status page, /api/runs, /metrics, /healthz and /readyz") {
		addr = fmt.Sprint(l["addr"])
	}
	held := inHandAt(addr)
	c.mu.Lock()
	c.kills = append(c.kills, killed{ids: held, at: time.Now()})
	c.mu.Unlock()
	_ = p.cmd.Process.Kill()
	_, exited := p.stopped(10 * time.Second)
	c.background(func() error { return c.spawn(replica) })
	return exited
}

// killed is what one SIGKILL left in hand.
type killed struct {
	ids []string
	at  time.Time
}

// recovery measures how soon the messages a SIGKILL left in hand were
// handled again by another worker (from the log lines' times, to the
// second): the most it took, and how many messages.
func (c *chaos) recovery(logs *syncBuffer) (longest time.Duration, messages int) {
	c.mu.Lock()
	kills := slices.Clone(c.kills)
	c.mu.Unlock()
	final := map[string]bool{"tenant change pushed": true, "already carried out; nothing to push": true,
		"already carried out; recorded in the ledger": true, "already applied by an earlier delivery of this message": true,
		staleLine: true, "message rejected": true}
	for _, k := range kills {
		for _, id := range k.ids {
			for _, l := range logs.lines("message_id", id) {
				at, err := time.Parse(time.RFC3339, fmt.Sprint(l["time"]))
				if err != nil || !final[fmt.Sprint(l["message"])] || at.Before(k.at.Truncate(time.Second)) {
					continue
				}
				longest = max(longest, at.Sub(k.at))
				messages++
				break
			}
		}
	}
	return longest, messages
}

// hook sees every request to the git server.
func (c *chaos) hook(w http.ResponseWriter, r *http.Request) bool {
	user, _, _ := r.BasicAuth()
	if !strings.HasPrefix(user, "worker-") || r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "git-receive-pack") {
		return true
	}
	// Read the whole pack first: the server then notices a client that
	// gives up (a stall past its timeout).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if strings.Contains(r.URL.Path, "/"+renamedTo+"/") {
		c.mu.Lock()
		if !c.renamed {
			c.renamed = true
			c.observed[faultRename]++
		}
		c.mu.Unlock()
	}
	n := c.pushes.Add(1)
	f := faultPlan[n]
	if f == "" {
		f = writer(n)
	}
	if f == "" && !regular(n) {
		f = c.takeCarried()
	}
	switch f {
	case faultKillHeld, faultKillAfterUpdate, faultKillHeartbeat:
		c.mu.Lock()
		_, running := c.procs[user]
		c.mu.Unlock()
		if !running {
			// A replica stopping with SIGTERM still pushes what it holds:
			// kill a worker that is not on its way out, at a later push.
			c.carry(f)
			return true
		}
	}
	switch f {
	case faultKillHeld:
		c.count(f, c.kill(user))
		http.Error(w, "worker killed while its push was held", http.StatusBadGateway)
		return false
	case faultKillAfterUpdate:
		rec := c.serve(r)
		if bytes.Contains(rec.Body.Bytes(), []byte("ok refs/heads/main")) {
			c.count(f, c.kill(user))
		} else {
			c.carry(f) // this push lost a race of its own: kill after the next one
		}
		copyResponse(w, rec)
		return false
	case faultRace, faultWriterNote, faultWriterYAML:
		if err := c.foreignCommit(n, f); err != nil {
			if f == faultRace {
				c.carry(f)
			}
			return true
		}
		rec := c.serve(r)
		c.count(f, bytes.Contains(rec.Body.Bytes(), []byte("ng refs/heads/main")))
		copyResponse(w, rec)
		return false
	case faultRename:
		if err := c.h.git.Rename(repoName, renamedTo); err != nil {
			c.background(func() error { return err })
			return true
		}
		c.mu.Lock()
		c.injected[f]++
		c.mu.Unlock()
		http.Redirect(w, r, strings.Replace(r.URL.Path, "/"+repoName+"/", "/"+renamedTo+"/", 1), http.StatusMovedPermanently)
		return false
	case faultKillHeartbeat:
		// Hold the push until the worker's heartbeat was killed, or the
		// worker gave the push up (then the fault did not happen).
		beaten := make(chan struct{})
		c.mu.Lock()
		c.heartbeat, c.beaten = user, beaten
		c.mu.Unlock()
		select {
		case <-beaten:
		case <-r.Context().Done():
			c.mu.Lock()
			missed := c.heartbeat == user // still armed: no heartbeat came
			c.heartbeat = ""
			c.mu.Unlock()
			if missed {
				c.count(f, false)
			}
		}
		http.Error(w, "held until the heartbeat", http.StatusBadGateway)
		return false
	case faultReplicaStart:
		c.count(f, true)
		c.background(func() error { return c.spawn(true) })
	case faultReplicaStop:
		c.mu.Lock()
		name := c.replica
		p := c.procs[name]
		delete(c.procs, name)
		c.replica = ""
		c.mu.Unlock()
		if p != nil {
			c.background(func() error {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				err, exited := p.stopped(20 * time.Second)
				c.count(faultReplicaStop, exited && err == nil)
				return nil
			})
		} else {
			c.count(faultReplicaStop, false)
		}
	default:
		if !regular(n) {
			return true
		}
		switch {
		case n%10 == 7:
			c.count(fault500, true)
			http.Error(w, "injected failure", http.StatusInternalServerError)
			return false
		case n%40 == 0:
			// Longer than the worker's git timeout: it must give up first.
			select {
			case <-r.Context().Done():
				c.count(faultStall, true)
			case <-time.After(30 * time.Second):
				c.count(faultStall, false)
			}
			return false
		}
	}
	return true
}

// carry moves a fault that could not take effect to the next push.
func (c *chaos) carry(f fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.carried = append(c.carried, f)
}

func (c *chaos) takeCarried() fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.carried) == 0 {
		return ""
	}
	f := c.carried[0]
	c.carried = c.carried[1:]
	return f
}

// foreignCommit commits to the branch directly in the bare repository, as
// another writer whose push lands first: f says which file it writes.
func (c *chaos) foreignCommit(n int64, f fault) error {
	file, content := "unrelated/race.txt", fmt.Sprintf("push %d\n", n)
	switch f {
	case faultWriterNote:
		file = fmt.Sprintf("unrelated/note-%d.txt", n%4)
	case faultWriterYAML:
		// Declares nothing, but every collision check reads it.
		file, content = "unrelated/notes.yaml", fmt.Sprintf("# push %d\n", n)
	}
	if err := c.h.git.WriteFile(repoName, "main", file, content, fmt.Sprintf("%s%d", foreignSubject, n)); err != nil {
		return err
	}
	c.foreign.Add(1)
	return nil
}

// foreignSubject begins the subject of each commit of the other writer.
const foreignSubject = "Foreign commit racing push "

// serve lets git answer r and records the answer.
func (c *chaos) serve(r *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	c.h.httpBackend().Backend(rec, r)
	return rec
}

func copyResponse(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// stop ends chaos and stops every worker with SIGTERM.
func (c *chaos) stop() {
	t := c.h.t
	t.Helper()
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.wg.Wait()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if err, ok := p.stopped(20 * time.Second); !ok || err != nil {
			t.Errorf("worker exit: %v (exited %v)", err, ok)
		}
	}
	for _, err := range c.errs {
		t.Error(err)
	}
}

// report lists each fault as injected/observed.
func (c *chaos) report() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for f := range plannedFaults() {
		parts = append(parts, fmt.Sprintf("%s %d/%d", f, c.injected[f], c.observed[f]))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// check fails the test unless every planned fault was injected the planned
// number of times and was seen to take effect.
func (c *chaos) check(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for f, n := range plannedFaults() {
		injected := c.injected[f]
		if openEnded[f] {
			injected = min(injected, n) // more is fine
		}
		if injected != n || c.observed[f] != c.injected[f] {
			t.Errorf("fault %s: planned %d, injected %d, observed %d", f, n, c.injected[f], c.observed[f])
		}
	}
}

// inHandAt lists the messages the worker serving addr holds (its status
// API's runs in flight).
func inHandAt(addr string) []string {
	resp, err := http.Get("http://" + addr + "/api/runs")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st struct {
		InFlight []struct {
			MessageID string `json:"message_id"`
		} `json:"in_flight"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return nil
	}
	var ids []string
	for _, r := range st.InFlight {
		ids = append(ids, r.MessageID)
	}
	return ids
}

// dump reports a stall: every running worker dumps its goroutines
// (SIGQUIT; the Go runtime writes them to the log and exits), the
// warnings and errors of the run are counted by message, the goroutines
// in this module's code are logged, and the whole log is written to a
// file whose path is logged.
func (c *chaos) dump() {
	t := c.h.t
	c.mu.Lock()
	running := make([]*process, 0, len(c.procs))
	for _, p := range c.procs {
		running = append(running, p)
	}
	c.mu.Unlock()
	mark := len(c.logs.String())
	for _, p := range running {
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	}
	for _, p := range running {
		select {
		case err := <-p.done:
			p.done <- err // for the cleanup that waits for it too
		case <-time.After(5 * time.Second):
		}
	}
	all := c.logs.String()
	counts := map[string]int{}
	for _, level := range []string{"warn", "error"} {
		for _, l := range c.logs.lines("level", level) {
			counts[fmt.Sprintf("%s: %v: %.120v", level, l["message"], l["error"])]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return counts[b] - counts[a] })
	var b strings.Builder
	for _, k := range keys[:min(len(keys), 20)] {
		fmt.Fprintf(&b, "%6d  %s\n", counts[k], k)
	}
	t.Logf("stall: %d workers running, state %s; warnings and errors by count:\n%s", len(running), c.report(), b.String())
	// The goroutines in this module's code, each with its header line.
	var g strings.Builder
	for _, block := range strings.Split(all[mark:], "\n\n") {
		if strings.Contains(block, "tenant-worker/internal/") && g.Len() < 12000 {
			g.WriteString(block)
			g.WriteString("\n\n")
		}
	}
	t.Logf("stall: goroutines of the workers (SIGQUIT):\n%s", g.String())
	path := filepath.Join(os.TempDir(), fmt.Sprintf("tenant-worker-fault-%d.log", time.Now().Unix()))
	if err := os.WriteFile(path, []byte(all), 0o644); err == nil {
		t.Logf("stall: the whole log of the run is in %s", path)
	}
}
