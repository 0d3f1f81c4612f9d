package pipeline

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/testenv/sendorder"
	"github.com/tenant-worker/tenant-worker/templates"
)

// whereIn says where the tree r has tenant id: "nowhere", tier@release
// (listed and its file there), or what is inconsistent.
func whereIn(t *testing.T, r gitops.Reader, id string) string {
	t.Helper()
	var at []string
	for _, tier := range sendorder.Tiers {
		dir := path.Join(templates.Root, "tenants", tier)
		k, err := r.ReadFile(dir + "/kustomization.yaml")
		if err != nil {
			t.Fatal(err)
		}
		f, ferr := r.ReadFile(dir + "/" + id + ".yaml")
		listed := strings.Contains(string(k), id+".yaml")
		switch {
		case ferr != nil && !listed:
			continue
		case ferr != nil || !listed:
			return "inconsistent in " + tier
		}
		_, v, _ := strings.Cut(string(f), `version: "`)
		v, _, _ = strings.Cut(v, ".x")
		at = append(at, tier+"@"+v)
	}
	if len(at) == 0 {
		return "nowhere"
	}
	return strings.Join(at, ",")
}

// TestBatchesInAnyOrderEndInSendOrder is the arrival-order oracle of
// internal/gitops through the pipeline: histories of two dozen tenants,
// delivered in a random order with redeliveries, in batches of random
// sizes (one commit each, one push, the ledger's records of a big batch
// squashed into its journal), the worker restarted on a new clone now and
// then. After every push the branch must be the send-order result of what
// has arrived.
func TestBatchesInAnyOrderEndInSendOrder(t *testing.T) {
	histories := 12
	if testing.Short() {
		histories = 3
	}
	var tenants []string
	for i := range 24 {
		tenants = append(tenants, fmt.Sprintf("o%d", i))
	}
	start := time.Now().Add(-time.Hour).Truncate(time.Second)
	journaled := 0
	for n := range histories {
		rng := rand.New(rand.NewPCG(uint64(n), 4402))
		h := sendorder.Generate(rng, 100+rng.IntN(80), tenants)
		arrival := sendorder.Shuffled(rng, h)
		e := setup(t)
		p := e.p
		var arrived []sendorder.Msg
		for len(arrival) > 0 {
			size := 1 + rng.IntN(20) // a few messages, or a backlog's batch
			if rng.IntN(2) == 0 {
				size = 90 + rng.IntN(90)
			}
			size = min(len(arrival), size)
			batch := arrival[:size]
			arrival = arrival[size:]
			var jobs []Job
			for _, o := range batch {
				jobs = append(jobs, Job{Request: decode(t, o.Kind, o.Body()), MessageID: o.ID, Queue: string(o.Kind),
					SentAt: start.Add(time.Duration(o.Sent) * time.Second)})
			}
			for i, r := range p.Apply(context.Background(), jobs) {
				if r.Err != nil {
					t.Fatalf("history %d: %s: %v\nhistory: %v", n, batch[i], r.Err, h)
				}
			}
			arrived = append(arrived, batch...)
			want, _ := sendorder.Tree(arrived)
			err := p.Read(context.Background(), func(r gitops.Reader) error {
				for _, id := range tenants {
					if got := whereIn(t, r, id); got != want[id].String() {
						return fmt.Errorf("after %d deliveries %s is %s, want %s", len(arrived), id, got, want[id])
					}
				}
				return nil
			})
			if err != nil {
				t.Fatalf("history %d: %v\nhistory (send order): %v\narrived: %v", n, err, h, arrived)
			}
			if out, _ := e.srv.Output("gitops.git", "ls-tree", "-r", "--name-only", "tenant-worker/ledger"); strings.Contains(out, "/journal/") {
				journaled++
			}
			if rng.IntN(3) == 0 {
				p = restart(t, e, "")
			}
		}
	}
	if journaled == 0 {
		t.Fatal("no batch's records went to the ledger's journal: the squash was not tested")
	}
}
