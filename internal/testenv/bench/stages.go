package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tenant-worker/tenant-worker/internal/flux"
	"github.com/tenant-worker/tenant-worker/internal/testenv/controlplane"
)

// The stages of a change on its way to live, in order, as the live run
// tells them apart (issue 49): each one's moment is the first poll that
// saw it.
const (
	StageReceived  = "received"  // the worker received the message (its run's start)
	StagePushed    = "pushed"    // the branch moved
	StagePublished = "published" // the shard folder's ExternalArtifact holds it (artifacts)
	StageApplied   = "applied"   // its Kustomization applied that revision
	StageMade      = "made"      // the HelmRelease exists
	StagePicked    = "picked up" // helm-controller wrote the HelmRelease's status
	StageInstall   = "install"   // the Helm release's storage exists (install started)
	StageInstalled = "installed" // the Helm release is deployed
	StageReady     = "ready"     // the HelmRelease is Ready at its generation
)

// Stages are the stages in order.
var Stages = []string{StageReceived, StagePushed, StagePublished, StageApplied, StageMade, StagePicked, StageInstall, StageInstalled, StageReady}

// probe reads where one sample's change is: the ExternalArtifact and
// Kustomization of its shard folder (artifacts), or the tenants
// Kustomization, and its HelmRelease and Helm storage.
type probe struct {
	cp *controlplane.ControlPlane
	// artifact is the shard folder's ExternalArtifact ("" when the layout
	// has none); kustomization is what applies the tenant's folder.
	artifact, kustomization string
	// was is the artifact's revision before the message was sent.
	was string
}

func (p probe) get(ctx context.Context, res, name string) *unstructured.Unstructured {
	gvr := flux.Kustomizations
	switch res {
	case "externalartifacts":
		gvr = flux.ExternalArtifacts
	case "helmreleases":
		gvr = flux.HelmReleases
	}
	o, err := p.cp.Dynamic.Resource(gvr).Namespace(controlplane.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return o
}

// revision is the artifact's revision now ("" without one).
func (p probe) revision(ctx context.Context) string {
	if p.artifact == "" {
		return ""
	}
	if ea := p.get(ctx, "externalartifacts", p.artifact); ea != nil {
		r, _, _ := unstructured.NestedString(ea.Object, "status", "artifact", "revision")
		return r
	}
	return ""
}

// look records, in st, each stage reached now: commit is the branch's
// head once pushed.
func (p probe) look(ctx context.Context, st map[string]time.Time, commit, release string, now time.Time) {
	mark := func(stage string) {
		if _, ok := st[stage]; !ok {
			st[stage] = now
		}
	}
	if commit == "" {
		return
	}
	applyRev := commit
	if p.artifact != "" {
		rev := p.revision(ctx)
		if rev == "" || rev == p.was {
			return
		}
		mark(StagePublished)
		applyRev = rev
	}
	if _, ok := st[StageApplied]; !ok {
		if k := p.get(ctx, "kustomizations", p.kustomization); k != nil {
			if r, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision"); strings.HasSuffix(r, applyRev) {
				mark(StageApplied)
			}
		}
	}
	hr := p.get(ctx, "helmreleases", release)
	if hr == nil {
		return
	}
	mark(StageApplied) // made: applied, whatever its status says yet
	mark(StageMade)
	if conds, _, _ := unstructured.NestedSlice(hr.Object, "status", "conditions"); len(conds) > 0 {
		mark(StagePicked)
	}
	if _, ok := st[StageInstalled]; !ok {
		ns, _, _ := unstructured.NestedString(hr.Object, "spec", "storageNamespace")
		name, _, _ := unstructured.NestedString(hr.Object, "spec", "releaseName")
		if secret, err := p.cp.Client.CoreV1().Secrets(ns).Get(ctx, "sh.helm.release.v1."+name+".v1", metav1.GetOptions{}); err == nil {
			mark(StagePicked)
			mark(StageInstall)
			if secret.Labels["status"] == "deployed" {
				mark(StageInstalled)
			}
		}
	}
	gen, _, _ := unstructured.NestedInt64(hr.Object, "status", "observedGeneration")
	if controlplane.ConditionTrue(hr, "Ready") && gen == hr.GetGeneration() {
		mark(StagePicked)
		mark(StageInstall)
		mark(StageInstalled)
		mark(StageReady)
	}
}

// statusAddr is the worker's status address, from its log.
var statusAddr = regexp.MustCompile(`"addr":"([^"]+)"[^\n]*"message":"serving the status page`)

// received is when the worker started the run of message id, from its
// /api/runs (zero when not found).
func (w *worker) received(ctx context.Context, id string) time.Time {
	w.mu.Lock()
	m := statusAddr.FindStringSubmatch(w.logs.String())
	w.mu.Unlock()
	if m == nil {
		return time.Time{}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/api/runs", m[1]), nil)
	if err != nil {
		return time.Time{}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}
	}
	defer resp.Body.Close()
	var page struct {
		Runs []struct {
			MessageID string    `json:"message_id"`
			Started   time.Time `json:"started_at"`
		} `json:"runs"`
		InFlight []struct {
			MessageID string    `json:"message_id"`
			Started   time.Time `json:"started_at"`
		} `json:"in_flight"`
	}
	if json.NewDecoder(resp.Body).Decode(&page) != nil {
		return time.Time{}
	}
	for _, r := range append(page.Runs, page.InFlight...) {
		if r.MessageID == id {
			return r.Started
		}
	}
	return time.Time{}
}
