// Package observe is what the inbox reports about its work, for metrics and traces: the Observer interface that
// inbox.WithObserver takes, the event each of its hooks receives, and the Mode and Outcome labels those events
// carry. It imports nothing of the inbox, so an Observer can be written against this package alone.
package observe

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Observer is told what the inbox does, for metrics and traces. Each hook takes the context of the message (or of
// the cleanup) and an event struct, so that an event can gain fields without breaking implementations. The inbox
// calls it on the message's goroutine, so its methods must be cheap and safe for concurrent use. Embed NopObserver
// to implement only some hooks and to keep compiling when Observer gains one. The prommetrics package implements
// it with Prometheus metrics, and the otelinbox module with OpenTelemetry metrics and spans.
//
// A claimed message is bracketed: Claimed is called when its row is claimed, before the handler runs, and Finished
// exactly once when the inbox is done with it, whatever the outcome. Claimed returns the context for the rest of
// the message's way: the handler runs with it (so a span started in Claimed is the parent of the handler's spans),
// and Committed and Finished of the same message are called with it. Lease mode's takeovers and lost leases go to
// an Observer that is also a LeaseObserver.
type Observer interface {
	// Claimed is called when a message's row is claimed for its consumer, before the handler runs. It returns ctx,
	// or a context derived from it, for the handler and the message's later hooks; nil stands for ctx. With
	// inbox.WithClaimAtCommit the claim goes with the COMMIT, after the handler, and Claimed is called before the handler
	// all the same, once per delivery: a copy then gets DuplicateSkipped, and finishes with OutcomeDuplicate.
	Claimed(ctx context.Context, e ClaimEvent) context.Context
	// Committed is called when the inbox ends a claimed message's transaction, its effect included, whether the
	// commit worked or not (see CommitEvent).
	Committed(ctx context.Context, e CommitEvent)
	// Finished is called once for every Claimed, when the inbox is done with the message: committed, failed or
	// dead-lettered.
	Finished(ctx context.Context, e FinishEvent)
	// DuplicateSkipped is called when a message of a consumer was applied before and its handler is skipped. No
	// Claimed precedes it.
	DuplicateSkipped(ctx context.Context, e SkipEvent)
	// DeadLettered is called when a message is published to the dead-letter topic.
	DeadLettered(ctx context.Context, e DeadLetterEvent)
	// Nacked is called when the inbox holds a message back itself, nacking it after the reject delay: a message it
	// cannot apply and may not dead-letter (no dead-letter topic, or publishing there failed), or any message while
	// the schema or the configuration is at fault. Such nacks repeat until someone acts: alert on them.
	Nacked(ctx context.Context, e NackEvent)
	// RowsCleaned is called after a cleanup batch deleted inbox rows of one consumer.
	RowsCleaned(ctx context.Context, e CleanupEvent)
	// FingerprintConflict is called, with inbox.WithFingerprint, when a copy's event ID was applied before for a message
	// with another fingerprint: before the copy is skipped (DuplicateSkipped follows) or dead-lettered.
	FingerprintConflict(ctx context.Context, e ConflictEvent)
}

// LeaseObserver is told about lease mode's hand-overs. An Observer given to inbox.WithObserver that also implements it
// is told of them too; NopObserver does, so an Observer that embeds it can define either hook alone.
type LeaseObserver interface {
	// LeaseTakenOver is called in lease mode when a consumer takes over an expired lease of another holder.
	LeaseTakenOver(ctx context.Context, e LeaseEvent)
	// LeaseLost is called in lease mode when a holder's write is refused because its lease ran out and another
	// holder took the message over: the holder's result is not recorded, and the new holder runs the handler again.
	// It is called with the context Claimed returned.
	LeaseLost(ctx context.Context, e LeaseEvent)
}

// Mode says how the inbox applies a message, for a metric label.
type Mode string

const (
	// ModeTransaction is the default mode: the claim and the handler's effect commit in one transaction of the
	// inbox's.
	ModeTransaction Mode = "transaction"
	// ModeJoined is the transaction mode inside watermill-sql's subscriber transaction (inbox.WithSubscriberTx), which
	// that subscriber commits after the ack.
	ModeJoined Mode = "joined"
	// ModeLease is lease mode (inbox.WithLease): the claim records a lease, and the row is marked done after the handler.
	ModeLease Mode = "lease"
)

// Outcome says how a claimed message ended, for a metric label.
type Outcome string

const (
	// OutcomeCommitted is a message whose effect is durable (in ModeJoined: handed to the subscriber's commit).
	OutcomeCommitted Outcome = "committed"
	// OutcomeFailed is a message whose handler or whose inbox statements failed: its effect was rolled back, or in
	// lease mode its lease released or left to run out, and the message is nacked.
	OutcomeFailed Outcome = "failed"
	// OutcomeDeadLettered is a message the inbox will not run again: dead-lettered, and acked.
	OutcomeDeadLettered Outcome = "dead_lettered"
	// OutcomeDuplicate is a message claimed at commit (inbox.WithClaimAtCommit) that turned out to be a copy of one
	// applied before: its handler ran, its effect was rolled back, and it was acked as a duplicate.
	OutcomeDuplicate Outcome = "duplicate"
	// OutcomeLeaseLost is a lease-mode message whose lease was taken over before its holder could record the
	// result; the message is nacked, and the new holder's attempt counts.
	OutcomeLeaseLost Outcome = "lease_lost"
)

// ClaimEvent is a claimed message, before its handler runs.
type ClaimEvent struct {
	// Consumer is the consumer name the message is applied for.
	Consumer string
	// EventID is the message's event ID, as the inbox stores it.
	EventID string
	// Mode is how the message is applied.
	Mode Mode
	// Message is the message itself, to read metadata such as a trace context from. Do not change it.
	Message *message.Message
	// Attempt is, in lease mode, which attempt this is, from 1; 1 in the other modes.
	Attempt int
	// Duration is how long the claim took, from its first statement until the row was the message's.
	Duration time.Duration
}

// CommitEvent is the end of a claimed message's transaction. In ModeTransaction it is the commit of the inbox's
// transaction; in ModeJoined the release of the inbox's savepoint, after which watermill-sql's subscriber commits
// on its own; in ModeLease the short transaction that marks the row done.
type CommitEvent struct {
	// Consumer is the consumer name the message is applied for.
	Consumer string
	// EventID is the message's event ID, as the inbox stores it.
	EventID string
	// Mode is how the message is applied.
	Mode Mode
	// Message is the message itself. Do not change it.
	Message *message.Message
	// Duration is how long the commit took (wall clock).
	Duration time.Duration
	// Err is why the commit failed, or nil. In lease mode it wraps inbox.ErrLeaseLost when the lease was taken over.
	Err error
}

// FinishEvent is the end of a claimed message's way through the inbox.
type FinishEvent struct {
	// Consumer is the consumer name the message is applied for.
	Consumer string
	// EventID is the message's event ID, as the inbox stores it.
	EventID string
	// Mode is how the message is applied.
	Mode Mode
	// Message is the message itself. Do not change it.
	Message *message.Message
	// Outcome is how the message ended.
	Outcome Outcome
	// Err is the error the inbox returns to the router (the message is then nacked), or nil.
	Err error
	// Duration is how long the message took from its claim on: claim, handler, commit, and any reject delay.
	Duration time.Duration
}

// SkipEvent is a copy of a message its consumer applied before, skipped without running the handler.
type SkipEvent struct {
	// Consumer is the consumer name the message is applied for.
	Consumer string
	// EventID is the message's event ID, as the inbox stores it.
	EventID string
	// Mode is how the message is applied.
	Mode Mode
	// Message is the message itself. Do not change it.
	Message *message.Message
	// Duration is how long the claim took to find the message applied.
	Duration time.Duration
}

// DeadLetterEvent is a message published to the dead-letter topic.
type DeadLetterEvent struct {
	// Consumer is the consumer name the message was to be applied for; empty when there was none (no_consumer).
	Consumer string
	// Mode is how the message was to be applied.
	Mode Mode
	// Message is the message itself. Do not change it.
	Message *message.Message
	// Reason is a short, bounded label, fit for a metric: "missing_id", "invalid_id", "attempts_exhausted",
	// "no_consumer", "unstorable_produced", "fingerprint_conflict" or "other".
	Reason string
}

// NackEvent is a message the inbox held back for the reject delay (see Observer.Nacked).
type NackEvent struct {
	// Consumer is the consumer name the message was to be applied for; empty when there was none.
	Consumer string
	// Mode is how the message was to be applied.
	Mode Mode
	// Message is the message itself. Do not change it.
	Message *message.Message
	// Reason is a short, bounded label, fit for a metric: one of DeadLetterEvent's reasons when the message could
	// not be applied and there is no dead-letter topic; "dead_letter_failed" when publishing to it failed;
	// "schema" when the inbox table is missing or not of the shape the inbox needs; "config" for a configuration
	// fault, such as a handler name that cannot be a consumer name; "consumer_ids" when the table has no id left
	// for a new consumer name (ErrConsumerIDsExhausted); "client_encoding" when a PostgreSQL session's
	// client_encoding is not UTF8 (ErrClientEncoding); "database" when checking the schema failed.
	Reason string
	// Delay is how long the message is held before the nack (the reject delay).
	Delay time.Duration
	// Err is the error the nack returns to the router.
	Err error
}

// LeaseEvent is a lease taken over or lost, in lease mode.
type LeaseEvent struct {
	// Consumer is the consumer name the message is applied for.
	Consumer string
	// EventID is the message's event ID, as the inbox stores it.
	EventID string
	// Mode is how the message is applied: ModeLease.
	Mode Mode
	// Message is the message itself. Do not change it.
	Message *message.Message
	// Attempt is the attempt of the holder that took the lease over, or that lost it, from 1.
	Attempt int
}

// CleanupEvent is one cleanup batch that deleted rows.
type CleanupEvent struct {
	// Table is the inbox table's name.
	Table string
	// Consumer is the consumer whose rows the batch deleted.
	Consumer string
	// Rows is how many rows the batch deleted.
	Rows int64
}

// NopObserver is an Observer and a LeaseObserver that does nothing: the default, and a base to embed.
type NopObserver struct{}

// Claimed returns ctx.
func (NopObserver) Claimed(ctx context.Context, _ ClaimEvent) context.Context { return ctx }

// Committed does nothing.
func (NopObserver) Committed(context.Context, CommitEvent) {}

// Finished does nothing.
func (NopObserver) Finished(context.Context, FinishEvent) {}

// DuplicateSkipped does nothing.
func (NopObserver) DuplicateSkipped(context.Context, SkipEvent) {}

// DeadLettered does nothing.
func (NopObserver) DeadLettered(context.Context, DeadLetterEvent) {}

// Nacked does nothing.
func (NopObserver) Nacked(context.Context, NackEvent) {}

// LeaseTakenOver does nothing.
func (NopObserver) LeaseTakenOver(context.Context, LeaseEvent) {}

// LeaseLost does nothing.
func (NopObserver) LeaseLost(context.Context, LeaseEvent) {}

// RowsCleaned does nothing.
func (NopObserver) RowsCleaned(context.Context, CleanupEvent) {}

// FingerprintConflict does nothing.
func (NopObserver) FingerprintConflict(context.Context, ConflictEvent) {}

// ConflictEvent is a copy of an event ID that was applied before for another message (inbox.WithFingerprint).
type ConflictEvent struct {
	// Consumer is the consumer name the message is applied for.
	Consumer string
	// EventID is the reused event ID.
	EventID string
	// Mode is how the message is applied.
	Mode Mode
	// Message is the copy that conflicts. Do not change it.
	Message *message.Message
	// Stored and Received are the fingerprints of the applied message and of this copy, in hexadecimal.
	Stored, Received string
	// DeadLettered is true when the copy is dead-lettered, false when it is skipped.
	DeadLettered bool
}
