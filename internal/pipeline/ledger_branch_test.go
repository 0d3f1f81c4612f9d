package pipeline

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/gitrepo"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/testenv/gitserver"
	"github.com/tenant-worker/tenant-worker/templates"
)

// TestLedgerBranchDeletedOnTheServer.
//
// Found by review: the ledger branch is fetched with a wildcard refspec and no
// pruning, so once someone deletes GIT_LEDGER_BRANCH on the server (the
// guarantees say deleting the ledger "only shortens the memory of what was
// applied"), the clone keeps the stale remote-tracking ref and LedgerHead()
// keeps answering the deleted commit. Every push then compare-and-swaps the
// ledger against a ref that no longer exists, is refused, read back as a
// lost race, and re-fetched onto the same stale ref: every batch fails
// after MaxAttempts conflicts, which are not a pause but a retry, so the
// messages go to the dead-letter queue. With a disk clone a restart does
// not cure it either.
//
// Expected: after the ledger branch is deleted, the next batch starts a new
// ledger branch (LedgerHead zero after the fetch) and the message is applied.
func TestLedgerBranchDeletedOnTheServer(t *testing.T) {
	e := setup(t)
	sent := time.Now().Add(-time.Minute)
	r := e.p.Apply(context.Background(), []Job{{
		Request:   decode(t, message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0"}`),
		MessageID: "m1", SentAt: sent,
	}})[0]
	if r.Err != nil || !r.Applied {
		t.Fatalf("first onboarding: %+v", r)
	}
	if out, err := e.srv.Output("gitops.git", "update-ref", "-d", "refs/heads/tenant-worker/ledger"); err != nil {
		t.Fatalf("delete the ledger branch: %v %s", err, out)
	}
	r = e.p.Apply(context.Background(), []Job{{
		Request:   decode(t, message.Onboarding, `{"tenant_id":"t2","tenant_tier":"premium","release_version":"0.0"}`),
		MessageID: "m2", SentAt: sent.Add(time.Second),
	}})[0]
	if r.Err != nil || !r.Applied {
		t.Fatalf("onboarding after the ledger branch was deleted: attempts %d, err %v", r.Attempts, r.Err)
	}
	if show(t, e, "tenants/premium/t2.yaml") == "<absent>" {
		t.Fatal("t2 is not on main")
	}
	if out, _ := e.srv.Output("gitops.git", "for-each-ref", "refs/heads/tenant-worker/ledger"); !strings.Contains(out, "ledger") {
		t.Fatal("no ledger branch after the onboarding")
	}
}

// TestInTreeLedgerBesideTheLedgerBranch.
//
// Found by review: migrate() only looks at <root>/.tenant-worker while the ledger
// branch does not exist. A repository where both exist is never migrated
// and the in-tree records are ignored for good. That is what a rolling
// update leaves (the old version's replica, still running beside a new one
// that migrated, writes .tenant-worker/ on main again with the records of
// the messages it applies), and what a migration finished by hand leaves.
// Here the old replica deployed 2.0 to t1 (its record only in the tree);
// the deployment 1.0 sent before it arrives late at the new worker and is
// applied: t1 is rolled back to 1.0, and the redelivered 2.0 message is not
// recognised as a duplicate. .tenant-worker/ also stays on main forever.
//
// Expected: records found in <root>/.tenant-worker are imported into the
// ledger branch (merged: the newer record wins) and the folder is removed
// from main, also when the ledger branch exists already; the late 1.0 is
// stale and the redelivered 2.0 a duplicate.
func TestInTreeLedgerBesideTheLedgerBranch(t *testing.T) {
	e := setup(t)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	t1, t2 := t0.Add(time.Minute), t0.Add(2*time.Minute)
	deploy := func(v string) message.Request {
		return decode(t, message.Deployment, `{"tenant_tier":"premium","tenant_id":"t1","release_version":"`+v+`"}`)
	}
	r := e.p.Apply(context.Background(), []Job{{
		Request:   decode(t, message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0"}`),
		MessageID: "m-on", SentAt: t0,
	}})[0]
	if r.Err != nil || !r.Applied {
		t.Fatalf("onboarding: %+v", r)
	}
	// The old version's replica applies deployment 2.0 (sent at t2): its
	// change, and its records in the tree, as it wrote them.
	old := restart(t, e, "")
	if r := old.ApplyOne(context.Background(), deploy("2.0")); r.Err != nil || !r.Applied {
		t.Fatalf("the old replica's deployment: %+v", r)
	}
	legacy := "# tenant-worker: send time (Unix ms, SQS SentTimestamp) of the last message applied to each\n" +
		"# tenant and pooled environment. A message sent earlier changes nothing of it. Written by tenant-worker.\n" +
		"release/t1 " + itoa(t2.UnixMilli()) + "\n"
	msgs := "# tenant-worker: messages applied in the queues' retention period (id, send time in Unix ms),\n" +
		"# oldest first; a redelivered one is recognised here. Written by tenant-worker.\n" +
		"m-d2 " + itoa(t2.UnixMilli()) + "\n"
	if err := e.srv.WriteFile("gitops.git", "main", templates.Root+"/.tenant-worker/targets", legacy, "ledger of the old replica"); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.WriteFile("gitops.git", "main", templates.Root+"/.tenant-worker/messages", msgs, "ledger of the old replica"); err != nil {
		t.Fatal(err)
	}

	p := restart(t, e, "")
	res := p.Apply(context.Background(), []Job{
		{Request: deploy("1.0"), MessageID: "m-d1", SentAt: t1}, // sent before 2.0, arrives late
		{Request: deploy("2.0"), MessageID: "m-d2", SentAt: t2}, // redelivered
	})
	if got := show(t, e, "tenants/premium/t1.yaml"); !strings.Contains(got, `version: "2.0.x"`) {
		t.Errorf("t1 was rolled back by the late deployment 1.0 (results %+v):\n%s", res, got)
	}
	if res[0].Err != nil || !res[0].Stale {
		t.Errorf("late deployment 1.0: %+v, want stale", res[0])
	}
	if res[1].Err != nil || !res[1].Duplicate {
		t.Errorf("redelivered deployment 2.0: %+v, want a duplicate", res[1])
	}
	if out, _ := e.srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "main", templates.Root+"/.tenant-worker"); out != "" {
		t.Errorf("the in-tree ledger stays on main: %q", out)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestLedgerAlonePushConfirmsMain.
//
// Found by review: a job whose plan changes only the ledger ("Already in place",
// held) is pushed as a ledger-only update, which compare-and-swaps the
// ledger branch alone. The first attempt of a batch is planned on the head
// as last seen, without a fetch, and a ledger-only job counts as applied
// (pending), so no fetch confirms it either. A writer that moves main
// without the ledger (a person, image automation, the old version during a
// rolling update) is therefore never seen: here t1 is removed by hand from
// its tier's kustomization after the worker's last push; a new onboarding
// of t1, sent after that, is decided on the stale head as "already in
// place", the ledger-only push succeeds, and the message is acknowledged
// although t1 is not on main. Before the ledger branch every push was a
// compare-and-swap of main, so a stale head was always a lost race.
//
// Expected: a message is acknowledged as carried out only if what it asks
// for is in place on main as it is when the push lands: the onboarding
// lists t1 again (or loses the race and does so on the fetched head).
func TestLedgerAlonePushConfirmsMain(t *testing.T) {
	e := setup(t)
	sent := time.Now().Add(-time.Minute)
	on := decode(t, message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0"}`)
	if r := e.p.Apply(context.Background(), []Job{{Request: on, MessageID: "m1", SentAt: sent}})[0]; r.Err != nil || !r.Applied {
		t.Fatalf("onboarding: %+v", r)
	}
	// Someone removes t1 by hand: its entry leaves the tier's kustomization.
	k := "tenants/premium/kustomization.yaml"
	before := show(t, e, k)
	after := strings.Replace(before, "\n  - t1.yaml", "", 1)
	if after == before {
		t.Fatalf("no entry for t1 in:\n%s", before)
	}
	if err := e.srv.WriteFile("gitops.git", "main", templates.Root+"/"+k, after, "Remove t1 by hand"); err != nil {
		t.Fatal(err)
	}
	r := e.p.Apply(context.Background(), []Job{{Request: on, MessageID: "m2", SentAt: sent.Add(30 * time.Second)}})[0]
	if r.Err != nil {
		t.Fatalf("onboarding again: %v", r.Err)
	}
	if !strings.Contains(show(t, e, k), "t1.yaml") {
		t.Fatalf("the onboarding sent after t1 was removed is acknowledged (%q, recorded %v), but t1 is not on main:\n%s",
			r.Message, r.Recorded, show(t, e, k))
	}
}

// TestProbeSeesACorruptMessagesGroup.
//
// Found by review: a messages group of the ledger branch edited by hand into
// something unreadable makes every message of that hour and bucket fail
// with ErrBroken (the worker pauses, as documented). But Probe blanks the
// job's message id ("a dry run of the request, not a delivery"), so the
// dry run never reads the messages group, never meets the fault, and
// reports it gone: the gate opens, the message is received again, fails
// again, and each round costs it a receive, until SQS moves it to the
// dead-letter queue, which the guarantees say a fault of the repository
// never does.
//
// Expected: while Apply of a job fails with a fault of the repository
// (gitops.ErrBroken), Probe of the same job does not return nil.
func TestProbeSeesACorruptMessagesGroup(t *testing.T) {
	e := setup(t)
	sent := time.Now().Add(-time.Minute)
	job := Job{Request: decode(t, message.Onboarding, onboard1), MessageID: "m1", SentAt: sent}
	if r := e.p.Apply(context.Background(), []Job{job})[0]; r.Err != nil || !r.Applied {
		t.Fatalf("onboarding: %+v", r)
	}
	files, err := e.srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "tenant-worker/ledger", templates.Root+"/messages/")
	if err != nil || strings.Count(files, "\n") != 1 {
		t.Fatalf("the ledger's messages: %q %v", files, err)
	}
	if err := e.srv.WriteFile("gitops.git", "tenant-worker/ledger", strings.TrimSpace(files), "m1 not-a-time\n", "a hand edit"); err != nil {
		t.Fatal(err)
	}
	p := restart(t, e, "")
	r := p.Apply(context.Background(), []Job{job})[0] // redelivered
	if !gitops.IsBroken(r.Err) {
		t.Fatalf("redelivery with its messages group corrupt: %+v, want a fault of the repository", r)
	}
	if err := p.Probe(context.Background(), job); err == nil {
		t.Fatalf("Probe reports the fault gone while the job still fails with: %v", r.Err)
	}
}

// TestHeldResultNamesTheLedgerCommit.
//
// Found by review: a held message makes a commit "Held: ..." on the ledger branch
// alone, but its Result.Commit is the branch head (b.tip), which becomes
// the result event's commit_sha; `send --wait` prints it as "held: ...
// (ledger commit <sha>)", naming a commit of main that has nothing to do
// with the message.
//
// Expected: the result of a held message names the ledger commit that
// holds it (the commit on GIT_LEDGER_BRANCH whose subject is "Held: ...").
func TestHeldResultNamesTheLedgerCommit(t *testing.T) {
	e := setup(t)
	sent := time.Now().Add(-time.Minute)
	on := decode(t, message.Onboarding, `{"tenant_id":"t1","tenant_tier":"premium","release_version":"0.0"}`)
	if r := e.p.Apply(context.Background(), []Job{{Request: on, MessageID: "m1", SentAt: sent}})[0]; r.Err != nil || !r.Applied {
		t.Fatalf("onboarding: %+v", r)
	}
	move := decode(t, message.Onboarding, `{"tenant_id":"t1","tenant_tier":"basic","release_version":"0.0"}`)
	r := e.p.Apply(context.Background(), []Job{{Request: move, MessageID: "m2", SentAt: sent.Add(time.Second)}})[0]
	if r.Err != nil || !r.Held || !r.Applied {
		t.Fatalf("onboarding to another tier: %+v, want held", r)
	}
	ledgerHead := strings.TrimSpace(mustOut(t, e, "rev-parse", "tenant-worker/ledger"))
	if r.Commit.String() != ledgerHead {
		subject := mustOut(t, e, "log", "-1", "--format=%s", r.Commit.String())
		t.Fatalf("the held result names commit %s (%q), not the ledger commit %s that holds it",
			r.Commit, strings.TrimSpace(subject), ledgerHead)
	}
}

// TestEachRootHasItsOwnLedger.
//
// Found by review: the in-tree ledger was kept per GITOPS_ROOT (<root>/.tenant-worker),
// so two workers for two roots of one repository and branch (the root is
// configurable: a production and a staging application plane) each had
// their own. The ledger branch has one default name whatever the root, and
// its keys ("tier/premium", "env/pool-1", "tenant/<id>") do not name the
// root: the two workers now share one ledger. A tier deployment of
// staging decides messages of production: here staging deploys premium 2.0
// (sent @10); a production onboarding sent @5 then takes release 2.0 (as if
// that deployment had been production's), which no production message
// asked for; and a production deployment of premium sent @5 is stale.
// (The second root's in-tree ledger is also never migrated, as the branch
// exists once the first root's worker migrated.)
//
// Expected: records of one root never decide messages of another: the
// production onboarding renders 0.0, and the production deployment applies.
func TestEachRootHasItsOwnLedger(t *testing.T) {
	const staging = "application-plane/staging"
	srv, err := gitserver.Start(t.TempDir(), "127.0.0.1:0", "tok")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	files, err := templates.Files()
	if err != nil {
		t.Fatal(err)
	}
	seed := fstest.MapFS{}
	for p, b := range files {
		seed[p] = &fstest.MapFile{Data: b}
		seed[staging+strings.TrimPrefix(p, templates.Root)] = &fstest.MapFile{Data: b}
	}
	url, err := srv.CreateRepo("gitops.git", "main", seed)
	if err != nil {
		t.Fatal(err)
	}
	worker := func(root string) *Pipeline {
		repo, err := gitrepo.Open(context.Background(), gitrepo.Options{URL: url, Branch: "main", LedgerBranch: "tenant-worker/ledger",
			Token: "tok", AuthorName: "admin", AuthorEmail: "admin@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return New(repo, Options{Layout: gitops.Layout{Root: root}})
	}
	prod, stag := worker(templates.Root), worker(staging)
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

	if r := stag.Apply(context.Background(), []Job{{MessageID: "s-on", SentAt: at(1),
		Request: decode(t, message.Onboarding, `{"tenant_id":"s1","tenant_tier":"premium","release_version":"0.0"}`)}})[0]; r.Err != nil || !r.Applied {
		t.Fatalf("staging onboarding: %+v", r)
	}
	if r := stag.Apply(context.Background(), []Job{{MessageID: "s-dep", SentAt: at(10),
		Request: decode(t, message.Deployment, `{"tenant_tier":"premium","release_version":"2.0"}`)}})[0]; r.Err != nil || !r.Applied {
		t.Fatalf("staging deployment: %+v", r)
	}
	r := prod.Apply(context.Background(), []Job{{MessageID: "p-on", SentAt: at(5),
		Request: decode(t, message.Onboarding, `{"tenant_id":"p1","tenant_tier":"premium","release_version":"0.0"}`)}})[0]
	if r.Err != nil || !r.Applied {
		t.Fatalf("production onboarding: %+v", r)
	}
	if got := show(t, env{srv: srv}, "tenants/premium/p1.yaml"); !strings.Contains(got, `version: "0.0.x"`) {
		t.Errorf("production's p1, onboarded at 0.0, has staging's release:\n%s", got)
	}
	r = prod.Apply(context.Background(), []Job{{MessageID: "p-dep", SentAt: at(6),
		Request: decode(t, message.Deployment, `{"tenant_tier":"premium","release_version":"1.0"}`)}})[0]
	if r.Err != nil || r.Stale || !r.Applied {
		t.Errorf("production deployment of premium 1.0 (sent @6): %+v, want applied (nothing in production is newer)", r)
	}
}
