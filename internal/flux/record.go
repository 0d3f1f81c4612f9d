package flux

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// ConfigMaps is the resource the readiness record is kept in.
var ConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// The record keeps at most maxEntries outcomes (about 60 bytes each, far
// below a ConfigMap's 1 MiB), the oldest dropped first, and writes at most
// claimAttempts times when other replicas write between its read and its
// write.
const (
	maxEntries    = 10000
	claimAttempts = 8
)

// Record is the durable record of the messages whose readiness outcome was
// decided: a ConfigMap that every replica reads and writes, one key per
// message id, "<outcome> <unix seconds>". Every write is a compare-and-swap
// on the ConfigMap's resourceVersion, so of two replicas that decide the
// same message one records it. Outcomes older than keep are dropped.
type Record struct {
	res       dynamic.ResourceInterface
	ns, name  string
	keep      time.Duration
	now       func() time.Time
	retryWait time.Duration
}

// NewRecord returns the record kept in ConfigMap namespace/name; keep
// should cover the window a restarted worker reads back (READY_TIMEOUT),
// with a margin.
func (c *Client) NewRecord(namespace, name string, keep time.Duration) *Record {
	return newRecord(c.dyn, namespace, name, keep)
}

func newRecord(dyn dynamic.Interface, namespace, name string, keep time.Duration) *Record {
	return &Record{res: dyn.Resource(ConfigMaps).Namespace(namespace), ns: namespace, name: name, keep: keep,
		now: time.Now, retryWait: 20 * time.Millisecond}
}

// Decided returns which of ids have an outcome recorded. A record that
// does not exist yet holds none.
func (r *Record) Decided(ctx context.Context, ids []string) (map[string]bool, error) {
	cm, err := r.res.Get(ctx, r.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the readiness record %s/%s: %w", r.ns, r.name, err)
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	out := map[string]bool{}
	for _, id := range ids {
		if _, ok := data[recordKey(id)]; ok {
			out[id] = true
		}
	}
	return out, nil
}

// Claim records the outcome of each message (by id) that has none
// recorded, in one write, and returns the ids it recorded. It creates the
// ConfigMap when it does not exist.
func (r *Record) Claim(ctx context.Context, outcomes map[string]string) (map[string]bool, error) {
	for attempt := 1; ; attempt++ {
		won, err := r.claim(ctx, outcomes)
		if err == nil || !(apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) || attempt == claimAttempts {
			if err != nil {
				return nil, fmt.Errorf("write the readiness record %s/%s: %w", r.ns, r.name, err)
			}
			return won, nil
		}
		// Another replica wrote between the read and the write: read again.
		t := time.NewTimer(time.Duration(attempt) * r.retryWait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("write the readiness record %s/%s: %w", r.ns, r.name, context.Cause(ctx))
		case <-t.C:
		}
	}
}

func (r *Record) claim(ctx context.Context, outcomes map[string]string) (map[string]bool, error) {
	cm, err := r.res.Get(ctx, r.name, metav1.GetOptions{})
	create := apierrors.IsNotFound(err)
	if err != nil && !create {
		return nil, err
	}
	if create {
		cm = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": r.name, "namespace": r.ns}}}
	}
	data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
	if data == nil {
		data = map[string]string{}
	}
	now := r.now()
	changed := prune(data, now.Add(-r.keep))
	won := map[string]bool{}
	for id, outcome := range outcomes {
		k := recordKey(id)
		if _, ok := data[k]; ok {
			continue
		}
		data[k] = outcome + " " + strconv.FormatInt(now.Unix(), 10)
		won[id] = true
	}
	if len(won) == 0 && !changed {
		return won, nil
	}
	if err := unstructured.SetNestedStringMap(cm.Object, data, "data"); err != nil {
		return nil, err
	}
	if create {
		_, err = r.res.Create(ctx, cm, metav1.CreateOptions{FieldManager: "tenant-worker"})
	} else {
		_, err = r.res.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "tenant-worker"})
	}
	if err != nil {
		return nil, err
	}
	return won, nil
}

// prune drops the entries recorded before cutoff (and any that do not
// read), then the oldest beyond maxEntries; it reports whether it dropped
// any.
func prune(data map[string]string, cutoff time.Time) bool {
	type entry struct {
		key string
		at  int64
	}
	var kept []entry
	changed := false
	for k, v := range data {
		_, at, _ := strings.Cut(v, " ")
		sec, err := strconv.ParseInt(at, 10, 64)
		if err != nil || sec < cutoff.Unix() {
			delete(data, k)
			changed = true
			continue
		}
		kept = append(kept, entry{k, sec})
	}
	if len(kept) < maxEntries {
		return changed
	}
	slices.SortFunc(kept, func(a, b entry) int { return cmp.Compare(a.at, b.at) })
	for _, e := range kept[:len(kept)-maxEntries+1] {
		delete(data, e.key)
	}
	return true
}

var validKey = regexp.MustCompile(`^[-._a-zA-Z0-9]{1,200}$`)

// recordKey is a message id as a ConfigMap key: itself (an SQS message id
// is a UUID), or a digest of it when it has characters a key may not.
func recordKey(id string) string {
	if validKey.MatchString(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256-" + hex.EncodeToString(sum[:16])
}
