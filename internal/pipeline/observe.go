package pipeline

import "time"

// Step names a step of the pipeline.
type Step string

// The steps, in the order a batch goes through them.
const (
	StepLock     Step = "lock" // waiting for the repository lock
	StepSync     Step = "sync"
	StepRender   Step = "render"
	StepCommit   Step = "commit"
	StepValidate Step = "validate"
	// StepIntent compares what Flux would apply before and after each
	// job's commit with what its message asks.
	StepIntent Step = "intent"
	StepPush   Step = "push"
)

// Steps lists the steps a batch runs once it holds the lock.
var Steps = []Step{StepSync, StepRender, StepCommit, StepValidate, StepIntent, StepPush}

// PushResult is how a push went.
type PushResult string

// The results of a push.
const (
	PushSuccess  PushResult = "success"
	PushConflict PushResult = "conflict" // another writer moved the branch
	PushError    PushResult = "error"
)

// PushResults lists every result.
var PushResults = []PushResult{PushSuccess, PushConflict, PushError}

// Observer hears what the pipeline does: the metrics and the status page's
// runs in flight listen here. Its methods are called from the goroutine
// that runs Apply, one batch at a time.
type Observer interface {
	// LockWaited: a batch waited d for the repository lock.
	LockWaited(d time.Duration)
	// StepStarted: jobs enter step.
	StepStarted(jobs []Job, step Step)
	// StepDone: a step took d.
	StepDone(step Step, d time.Duration)
	// Pushed: a push ended with result.
	Pushed(result PushResult)
}

type nopObserver struct{}

func (nopObserver) LockWaited(time.Duration)     {}
func (nopObserver) StepStarted([]Job, Step)      {}
func (nopObserver) StepDone(Step, time.Duration) {}
func (nopObserver) Pushed(PushResult)            {}
