package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

// leaseWriteTimeout bounds the bookkeeping writes that must outlive a cancelled message context: after an effect
// landed, recording 'done' is worth finishing during a shutdown.
const leaseWriteTimeout = 10 * time.Second

// Lease is a lease-mode handler's hold on its message, from LeaseFromContext.
type Lease struct {
	inbox     *core
	consumer  string
	id        string
	token     string
	attempt   int
	lastError string
}

type leaseKey struct{}

// LeaseFromContext returns the lease of the message a lease-mode handler runs for. ok is false in transaction mode.
func LeaseFromContext(ctx context.Context) (l *Lease, ok bool) {
	l, ok = ctx.Value(leaseKey{}).(*Lease)
	return l, ok
}

// Attempt returns which attempt this is, from 1. On attempt 2 or later an earlier holder may have reached the
// provider before it failed or died: ask the provider what happened to IdempotencyKey before calling again, where
// the provider offers that.
func (l *Lease) Attempt() int { return l.attempt }

// PreviousError returns why the previous attempt ended without 'done' (the handler's error, or "lease of attempt N
// expired" when its holder died or hung), or "" on the first attempt.
func (l *Lease) PreviousError() string { return l.lastError }

// IdempotencyKey returns the key to hand the provider: the same on every attempt and every copy of the message,
// and different for every consumer, so two handlers of one event do not suppress each other's calls. It is the
// package-level IdempotencyKey of the lease's consumer and event ID.
func (l *Lease) IdempotencyKey() string { return IdempotencyKey(l.consumer, l.id) }

// StepKey returns a key for one of several calls a handler makes, such as "charge" and "receipt": stable like
// IdempotencyKey, and different per step, so the provider does not answer the second call with the first's result.
// It is the package-level StepKey of the lease's consumer and event ID and step.
func (l *Lease) StepKey(step string) string { return StepKey(l.consumer, l.id, step) }

// Extend moves the end of the lease to d from now, by the database clock, for a call that takes longer than the
// lease. It returns an error wrapping ErrLeaseLost when the lease was already taken over: the handler should then
// stop, since the new holder makes the call.
func (l *Lease) Extend(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: Lease.Extend(%s): want a positive duration", ErrInvalidOption, d)
	}
	return l.inbox.store.Fenced(ctx, l.inbox.db.pool, store.ExtendLease, l.consumer, l.id, l.token, d.Milliseconds())
}

// applyLeased is the path of one message in lease mode: claim, call out, complete; each write of the holder fenced
// by its lease token.
func (i *core) applyLeased(msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	ctx := msg.Context()
	fields := logFields(msg, consumer, id)
	l := &Lease{inbox: i, consumer: consumer, id: id, token: watermill.NewUUID()}
	ob := i.observe(msg, consumer, id, observe.ModeLease)
	ob.claiming()
	c, err := i.store.ClaimLease(ctx, i.db.pool, consumer, id, l.token, i.cfg.lease, i.fingerprintOf(msg))
	if fc := (*store.LeaseFingerprintConflict)(nil); errors.As(err, &fc) {
		// The row, released or run out, is another message's; the claim was rolled back.
		if _, err := i.takenOverByAnother(msg, consumer, id, ob, func() ([]byte, error) { return fc.Stored, nil }); err != nil {
			return nil, i.settle(msg, consumer, err)
		}
		return nil, nil
	}
	if errors.Is(err, ErrInvalidEventID) {
		return nil, i.reject(msg, consumer, err)
	}
	if err != nil {
		return nil, i.settle(msg, consumer, err)
	}
	if !c.Claimed {
		switch c.State {
		case store.StateDone:
			if err := i.checkCopy(msg, consumer, id, observe.ModeLease, i.committedFingerprint(ctx, consumer, id)); err != nil {
				return nil, i.settle(msg, consumer, err)
			}
			i.cfg.logger.Info("skipped duplicate", fields)
			ob.skipped()
			return store.DecodeProduced(consumer, id, c.Produced)
		case store.StateFailed:
			i.cfg.logger.Info("skipped dead-lettered message", fields)
			return nil, nil
		}
		// The holder may still succeed, or die and let the lease run out: hand the copy back until then.
		wait := min(max(c.Remaining, leaseBusyFloor), leaseBusyCeiling)
		i.cfg.logger.Debug("Inbox lease is held; nacking the copy", fields.Add(watermill.LogFields{"retry_in": wait}))
		return nil, sleepThen(ctx, wait, fmt.Errorf("%w: %s/%s for %s more", ErrLeaseHeld, consumer, id, c.Remaining))
	}
	l.attempt, l.lastError = c.Attempt, c.LastError
	if c.Takeover {
		i.cfg.logger.Info("Inbox took over an expired lease", fields.Add(watermill.LogFields{"attempt": c.Attempt, "previous_error": c.LastError}))
		i.cfg.leaseObserver.LeaseTakenOver(ctx, observe.LeaseEvent{Consumer: consumer, EventID: id, Mode: observe.ModeLease, Message: msg, Attempt: c.Attempt})
	}
	if c.Attempt > i.cfg.maxAttempts { // the holder of the last attempt died
		return nil, i.exhausted(msg, l, c.LastError)
	}
	// The rest of the message's way, its bookkeeping writes included, runs with the context the observer returned.
	msg.SetContext(ob.claimed(c.Attempt))
	defer msg.SetContext(ctx)
	produced, err := i.finishLeased(msg, l, h, ob)
	ob.finish(err)
	return produced, err
}

// finishLeased runs the handler of a claimed lease-mode message and records its result.
func (i *core) finishLeased(msg *message.Message, l *Lease, h message.HandlerFunc, ob *observed) ([]*message.Message, error) {
	consumer, id := l.consumer, l.id
	produced, err := i.runLeased(msg, l, h, ob)
	if err != nil {
		if l.attempt >= i.cfg.maxAttempts {
			return nil, i.exhausted(msg, l, err.Error())
		}
		return nil, errors.Join(err, i.release(msg, l, err.Error()))
	}
	stampProduced(produced, consumer, id, i.cfg.idKey)
	raw, err := store.EncodeProduced(consumer, id, produced)
	if err == nil {
		start := time.Now()
		err = i.leaseWrite(msg, l, store.CompleteLease, raw)
		ob.commitDone(start, err)
	}
	if errors.Is(err, ErrProducedUnstorable) {
		// The effect happened, and running the handler again would meet the same refusal: park the message with
		// the reason, so an operator sees what the handler produced could not be kept.
		return nil, i.giveUp(msg, l, err, err.Error(), nil)
	}
	if err != nil {
		return nil, err // the next copy finds the row as it is now: a new holder's, or ours to take over
	}
	return produced, nil
}

// runLeased runs h with the lease in the message context. A panic releases the lease before it goes on up, so the
// next copy need not wait for the lease to run out.
func (i *core) runLeased(msg *message.Message, l *Lease, h message.HandlerFunc, ob *observed) ([]*message.Message, error) {
	ctx := msg.Context()
	msg.SetContext(withClaim(context.WithValue(ctx, leaseKey{}, l), &claimValue{id: l.id}))
	defer msg.SetContext(ctx)
	defer func() {
		if r := recover(); r != nil {
			_ = i.release(msg, l, fmt.Sprintf("panic: %v", r)) // logged; the panic goes on up
			panic(r)
		}
	}()
	return ob.run(h, msg)
}

// exhausted ends a message whose attempts are used up, with its attempts and last error (see giveUp).
func (i *core) exhausted(msg *message.Message, l *Lease, lastError string) error {
	cause := fmt.Errorf("%w: %d of %d, last error: %s", ErrAttemptsExhausted, l.attempt, i.cfg.maxAttempts, lastError)
	return i.giveUp(msg, l, cause, lastError, map[string]string{AttemptsKey: strconv.Itoa(l.attempt)})
}

// giveUp ends a message that lease mode will not run again: dead-lettered with cause and extra metadata, then its
// row marked 'failed' with lastError so later copies are acked without running. Without a dead-letter publisher,
// or when that publish fails, the lease is released and the message nacked after the reject delay: kept, never
// dropped.
func (i *core) giveUp(msg *message.Message, l *Lease, cause error, lastError string, extra map[string]string) error {
	ctx := msg.Context()
	fields := logFields(msg, l.consumer, l.id)
	if i.cfg.dlqPublisher == nil {
		relErr := i.release(msg, l, lastError)
		i.warnNoDeadLetter(cause, fields)
		i.cfg.logger.Error("Inbox gave up on message; nacking it after the reject delay (set WithDeadLetter to park such messages)", cause, fields)
		err := errors.Join(cause, relErr)
		i.nacked(msg, l.consumer, reasonLabel(cause), err)
		return sleepThen(ctx, i.cfg.rejectDelay, err)
	}
	if err := i.deadLetter(msg, cause, extra); err != nil {
		relErr := i.release(msg, l, lastError)
		i.cfg.logger.Error("Inbox cannot dead-letter message; nacking it after the reject delay", err, fields)
		err = errors.Join(err, relErr)
		i.nacked(msg, l.consumer, "dead_letter_failed", err)
		return sleepThen(ctx, i.cfg.rejectDelay, err)
	}
	i.deadLettered(msg, l.consumer, cause)
	i.cfg.logger.Error("Inbox dead-lettered message", cause, fields.Add(watermill.LogFields{"dead_letter_topic": i.cfg.dlqTopic}))
	// A failure here leaves the row 'processing'. Returning it nacks the message, so a copy comes back, takes the
	// row over once the lease has run out and dead-letters it again: a duplicate dead letter, never a lost message.
	return i.leaseWrite(msg, l, store.FailLease, storedError(lastError))
}

// release hands the lease back after a failed attempt, recording why, so that the next copy may claim at once.
func (i *core) release(msg *message.Message, l *Lease, reason string) error {
	return i.leaseWrite(msg, l, store.ReleaseLease, storedError(reason))
}

// leaseWrite runs one of the holder's fenced writes, outliving a cancelled message context, and logs a failure as
// what it is: a lease taken over by another consumer, or a write that failed.
func (i *core) leaseWrite(msg *message.Message, l *Lease, lop store.LeaseOp, arg any) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(msg.Context()), leaseWriteTimeout)
	defer cancel()
	err := i.store.Fenced(ctx, i.db.pool, lop, l.consumer, l.id, l.token, arg)
	fields := logFields(msg, l.consumer, l.id).Add(watermill.LogFields{"attempt": l.attempt, "write": lop.String()})
	switch {
	case errors.Is(err, ErrLeaseLost):
		i.cfg.logger.Error("Inbox lease write failed: the lease ran out and another consumer took it over", err, fields)
		i.cfg.leaseObserver.LeaseLost(msg.Context(), observe.LeaseEvent{Consumer: l.consumer, EventID: l.id, Mode: observe.ModeLease, Message: msg, Attempt: l.attempt})
	case err != nil:
		i.cfg.logger.Error("Inbox lease write failed; the row keeps its state, and its lease runs out as it would "+
			"after a crash", err, fields)
	}
	return err
}

// storedError returns text as lease mode stores it: valid UTF-8 without NUL, at most MaxStoredErrorBytes long.
func storedError(text string) string {
	text = strings.ReplaceAll(strings.ToValidUTF8(text, "\uFFFD"), "\x00", "\uFFFD")
	if len(text) <= MaxStoredErrorBytes {
		return text
	}
	const ellipsis = "…"
	cut := MaxStoredErrorBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(text[cut]) {
		cut--
	}
	return text[:cut] + ellipsis
}
