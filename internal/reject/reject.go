// Package reject classifies failures that are the message's fault.
//
// A rejection is terminal: retrying the same message can never succeed, so the
// worker moves it to the dead-letter queue (or deletes it) instead of letting
// SQS redeliver it. Every other error is treated as transient and retried.
package reject

import (
	"errors"
	"fmt"
)

// Reason is a short, fixed label for a rejection. It is used as a metric label
// and as a message attribute on the dead-letter copy, so the set stays small.
type Reason string

// The reasons a message can be refused for.
const (
	InvalidJSON     Reason = "invalid_json"
	MissingField    Reason = "missing_field"
	InvalidField    Reason = "invalid_field"
	InvalidTenantID Reason = "invalid_tenant_id"
	ReservedTenant  Reason = "reserved_tenant_id"
	UnknownTier     Reason = "unknown_tier"
	InvalidVersion  Reason = "invalid_version"
	TierConflict    Reason = "tier_conflict"
	TenantNotFound  Reason = "tenant_not_found"
	InvalidRender   Reason = "invalid_render"
	TooLarge        Reason = "too_large"
	// NameCollision: the tenant's objects would share kind, namespace and
	// name with an object the platform declares outside the tier folders.
	NameCollision Reason = "name_collision"
	// UnintendedChange: what Flux would apply would change in more, or
	// other, objects than the message names. A message is rejected for it
	// only when its own value causes it; otherwise the repository is at
	// fault and the worker pauses, naming the files.
	UnintendedChange Reason = "unintended_change"
)

// Reasons lists every reason, for pre-initialising metrics.
var Reasons = []Reason{
	InvalidJSON, MissingField, InvalidField, InvalidTenantID, ReservedTenant, UnknownTier,
	InvalidVersion, TierConflict, TenantNotFound, InvalidRender, TooLarge, NameCollision, UnintendedChange,
}

// Error is a terminal rejection of a message.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("rejected (%s): %v", e.Reason, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds a rejection with a formatted cause.
func Errorf(reason Reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Wrap marks err as a terminal rejection for reason. A nil err stays nil.
func Wrap(reason Reason, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Reason: reason, Err: err}
}

// As reports whether err is, or wraps, a rejection and returns it.
func As(err error) (*Error, bool) {
	var r *Error
	if errors.As(err, &r) {
		return r, true
	}
	return nil, false
}
