package worker

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/tenant-worker/tenant-worker/internal/gitops"
	"github.com/tenant-worker/tenant-worker/internal/history"
	"github.com/tenant-worker/tenant-worker/internal/message"
	"github.com/tenant-worker/tenant-worker/internal/pipeline"
	"github.com/tenant-worker/tenant-worker/internal/results"
)

// EndHolds, every interval until ctx ends, rejects the held messages whose
// hold has ended (gitops.EndHolds) and publishes a second result event
// for each: outcome rejected, with the reason of its conflict.
func (w *Worker) EndHolds(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.EndHoldsNow(ctx)
	}
}

// EndHoldsNow is one round of EndHolds; it returns how many messages it
// rejected.
func (w *Worker) EndHoldsNow(ctx context.Context) int {
	log := zerolog.Ctx(ctx).With().Str("task", "end holds").Logger()
	res := w.applier.Apply(ctx, []pipeline.Job{{Request: message.Request{Kind: gitops.EndHolds}, SentAt: time.Now()}})[0]
	if res.Err != nil {
		log.Warn().Err(res.Err).Msg("could not end the holds that ran out; trying again later")
		return 0
	}
	if !res.Applied || len(res.Resolved) == 0 {
		return 0
	}
	w.publishResults(ctx, log, w.resolved(log, res.Resolved, res.Commit.String()))
	return len(res.Resolved)
}

// resolved are the result events of the messages whose outcome a pushed
// commit altered: a held one carried out, or rejected once its hold
// ended; an applied one held again (a message sent before it arrived).
func (w *Worker) resolved(log zerolog.Logger, rs []gitops.Resolution, commit string) []results.Event {
	var events []results.Event
	for _, r := range rs {
		outcome := r.Outcome
		switch r.Outcome {
		case string(history.Unchanged):
			outcome = OutcomeNoop
		case string(history.Rejected):
			outcome = OutcomeRejected
			w.metrics.Rejections.WithLabelValues(w.queues[r.Request.Kind], string(r.Reason)).Inc()
		}
		text := ""
		if r.Reason != "" {
			text = "in send order it does not fit where its tenant is (" + string(r.Reason) + ")"
			if outcome == OutcomeRejected {
				text += ", and no message sent before it came within the hold"
			}
		}
		log.Info().Str("message_id", r.MessageID).Str("kind", string(r.Request.Kind)).Str("tenant", r.Request.TenantID).
			Str("tier", r.Request.Tier).Str("outcome", outcome).Str("reason", string(r.Reason)).Str("commit", commit).
			Msg("an earlier message's outcome changed")
		events = append(events, results.Event{
			MessageID: r.MessageID, Queue: w.queues[r.Request.Kind], Kind: string(r.Request.Kind), TenantID: r.Request.TenantID,
			Tier: r.Request.Tier, Outcome: outcome, Reason: string(r.Reason), Error: text, CommitSHA: commit,
		})
	}
	return events
}
