package gitops

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/reject"
	"github.com/tenant-worker/tenant-worker/internal/testenv/sendorder"
)

// The arrival-order oracle: histories that are valid in send order,
// delivered in a random order with redeliveries, through the real planner
// and ledger (every plan reads the tree and the ledger as the last one
// left them, as a restarted worker would). After every delivery the tree
// must be the send-order result of what has arrived, as the model of
// internal/testenv/sendorder says: so the last tree is the send-order
// result of the whole history.

var oracleTenants = []string{"t1", "t2", "t3"}

func msgOf(o sendorder.Msg) msg { return msg{o.ID, o.Kind, o.Body(), o.Sent} }

// treeOf reads where the tree has every tenant, and the pool's release.
func treeOf(m fstest.MapFS, tenants []string) (map[string]string, string) {
	out := map[string]string{}
	for _, id := range tenants {
		out[id] = whereIs(m, id)
	}
	_, v, _ := strings.Cut(file(m, "pooled-envs/pool-1.yaml"), `version: "`)
	v, _, _ = strings.Cut(v, ".x")
	return out, v
}

// runOracle delivers arrival to a fresh tree and checks the tree after
// every delivery; it returns the first disagreement.
func runOracle(t *testing.T, history, arrival []sendorder.Msg) error {
	t.Helper()
	m := seed(t)
	var arrived []sendorder.Msg
	var log []string
	for _, o := range arrival {
		c, err := try(t, m, msgOf(o))
		if err != nil {
			return fmt.Errorf("%s refused: %v\nhistory: %v\narrival: %v", o, err, history, arrival)
		}
		arrived = append(arrived, o)
		log = append(log, o.String()+": "+outcome(c))
		want, pool := sendorder.Tree(arrived)
		got, gotPool := treeOf(m, oracleTenants)
		for _, id := range oracleTenants {
			if got[id] != want[id].String() {
				return fmt.Errorf("after %d deliveries %s is %s, want %s\nhistory (send order): %v\ndeliveries: %s",
					len(arrived), id, got[id], want[id], history, strings.Join(log, "; "))
			}
		}
		if gotPool != pool {
			return fmt.Errorf("after %d deliveries pool-1 is at %s, want %s\nhistory: %v\ndeliveries: %s",
				len(arrived), gotPool, pool, history, strings.Join(log, "; "))
		}
	}
	return nil
}

// TestArrivalOrderOracle: a few thousand histories, each in a random
// order of arrival.
func TestArrivalOrderOracle(t *testing.T) {
	n := 2000
	if testing.Short() {
		n = 200
	}
	for i := range n {
		rng := rand.New(rand.NewPCG(uint64(i), 44))
		h := sendorder.Generate(rng, 4+rng.IntN(10), oracleTenants)
		if err := runOracle(t, h, sendorder.Shuffled(rng, h)); err != nil {
			t.Fatalf("seed %d: %v", i, err)
		}
	}
}

// FuzzArrivalOrder is the oracle's generator as a fuzz target (make fuzz):
// each input is a seed of a history and of its order of arrival.
func FuzzArrivalOrder(f *testing.F) {
	for _, s := range []uint64{1, 2, 3, 44, 1000} {
		f.Add(s, uint8(12))
	}
	f.Fuzz(func(t *testing.T, seed uint64, steps uint8) {
		rng := rand.New(rand.NewPCG(seed, 44))
		h := sendorder.Generate(rng, 1+int(steps%24), oracleTenants)
		if err := runOracle(t, h, sendorder.Shuffled(rng, h)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestArrivalOrderOracleOverTime: as TestArrivalOrderOracle, with time:
// the ledger keeps a retention period of 8 seconds (what is older is
// folded into each tenant's base), messages arrive after random delays or
// never, and a message that does not fit is held for the retention (or,
// every other history, 3 seconds), then rejected. The model folds what
// arrived, less what was rejected.
func TestArrivalOrderOracleOverTime(t *testing.T) {
	const retention = 8
	n := 600
	if testing.Short() {
		n = 60
	}
	for i := range n {
		hold := retention
		if i%2 == 1 {
			hold = 3
		}
		rng := rand.New(rand.NewPCG(uint64(i), 4401))
		h := sendorder.Generate(rng, 6+rng.IntN(14), oracleTenants)
		m := seed(t)
		var arrived []sendorder.Msg
		rejected := map[string]bool{}
		var log []string
		for _, d := range sendorder.Delayed(rng, h, retention) {
			// A hold ends a retention period after the message was sent.
			_, _, held := sendorder.Fold(arrived, rejected)
			for _, o := range held {
				if o.Sent+hold <= d.At {
					rejected[o.ID] = true
				}
			}
			c, err := tryWith(t, m, msgOf(d.Msg), Stamp{Now: t0.Add(time.Duration(d.At) * time.Second),
				Retention: retention * time.Second, Hold: time.Duration(hold) * time.Second})
			// In conflict when it arrives, and its hold over already: refused.
			_, _, misfits := sendorder.Fold(append(slices.Clone(arrived), d.Msg), rejected)
			late := d.Sent+hold <= d.At && slices.ContainsFunc(misfits, func(o sendorder.Msg) bool { return o.ID == d.ID })
			if _, ok := reject.As(err); ok && (late || rejected[d.ID]) {
				rejected[d.ID] = true
				log = append(log, fmt.Sprintf("%s at %d: refused", d.Msg, d.At))
				continue
			}
			if late {
				t.Fatalf("seed %d: %s at %d, past its hold, was not refused: %v\nhistory: %v\ndeliveries: %s", i, d.Msg, d.At, err, h, strings.Join(log, "; "))
			}
			if err != nil {
				t.Fatalf("seed %d: %s at %d refused: %v\nhistory: %v\ndeliveries: %s", i, d.Msg, d.At, err, h, strings.Join(log, "; "))
			}
			arrived = append(arrived, d.Msg)
			log = append(log, fmt.Sprintf("%s at %d: %s", d.Msg, d.At, outcome(c)))
			want, _, _ := sendorder.Fold(arrived, rejected)
			for _, id := range oracleTenants {
				if got := whereIs(m, id); got != want[id].String() {
					t.Fatalf("seed %d: after %d deliveries %s is %s, want %s\nhistory (send order): %v\ndeliveries: %s",
						i, len(arrived), id, got, want[id], h, strings.Join(log, "; "))
				}
			}
		}
	}
}

// tryWith is try with st's times and hold.
func tryWith(t *testing.T, m fstest.MapFS, x msg, st Stamp) (Change, error) {
	t.Helper()
	req, err := message.Decode(x.kind, []byte(x.body))
	if err != nil {
		t.Fatal(err)
	}
	st.MessageID, st.Sent, st.Ledger = x.id, t0.Add(time.Duration(x.sent)*time.Second), records(m)
	c, err := layout.PlanAt(FS{m}, req, st)
	if err == nil {
		apply(m, c)
	}
	return c, err
}
