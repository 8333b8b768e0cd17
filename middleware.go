package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// Middleware wraps h so that each message is applied at most once per consumer. The path of one message:
//
//  0. Once, before the first message: check the inbox table (creating it unless WithAutoMigrate(false)) and learn
//     the type of its IDs. A schema or configuration fault holds every message back for the reject delay.
//  1. Read the event ID; a message without a usable one is dead-lettered or nacked after a delay.
//  2. Begin a transaction, or join the one watermill-sql's subscriber carries (through the Database's joiners), or,
//     in batch mode, share one with the messages in flight beside it (batch.go, internal/batch).
//  3. Claim (consumer, ID) in the inbox table. If it was claimed before, skip h: roll back, and return the
//     messages h produced the first time so the router sends them again.
//  4. Run h with the transaction in its context (TxFromContext); h does its side effect on it. The messages h
//     returns get identities derived from (consumer, ID, position) and are stored with the row.
//  5. Commit, and only then return, so the router acks after the effect is durable. An error, a panic or a
//     cancelled context rolls back the effect and the claim together, and the router nacks.
//
// In lease mode (WithLease) steps 2 to 5 are different: the claim is a short transaction of its own that records a
// lease, the handler calls out with an idempotency key, and the row is marked done afterwards (see WithLease).
func (i *Inbox) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		if err := i.ready(msg); err != nil { // schema and consumer name usable? if not, nacked after a delay
			return nil, err
		}
		consumer, id, err := i.identify(msg)
		if err != nil {
			return nil, i.reject(msg, consumer, err)
		}
		// A consumer's first message registers its name on a connection of its own: before a transaction holds
		// one, or handlers that each hold one and wait for another would drain the pool for good.
		if _, err := i.store.ConsumerID(ctx, consumer); err != nil {
			return nil, i.settle(msg, consumer, err)
		}
		if i.cfg.lease > 0 {
			return i.applyLeased(msg, consumer, id, h) // for effects outside the database
		}
		if tx, ok := i.db.joined(ctx); ok && i.cfg.subscriberTx {
			return i.applyInSubscriberTx(tx, msg, consumer, id, h) // commits on the subscriber's ack
		}
		if i.cfg.batchSize > 0 {
			return i.applyBatched(msg, consumer, id, h) // one transaction shared with concurrent messages
		}
		if i.cfg.claimAtCommit {
			return i.applyAtCommit(msg, consumer, id, h) // the claim goes with COMMIT (atcommit.go)
		}
		return i.applyOwn(msg, consumer, id, h)
	}
}

// A claim that lost a lock conflict (store.ErrClaimLostLock: a deadlock between waiting inserts, a lock timeout, a
// serialization failure) ran nothing, and is tried again in a new transaction, claimTries times in all, claimBackoff
// longer each time, before its error nacks the message.
const (
	claimTries   = 3
	claimBackoff = 10 * time.Millisecond
)

// applyOwn applies msg in a transaction of its own: begin, claim, run h, commit.
func (i *Inbox) applyOwn(msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	return i.applyOwnObserved(msg, consumer, id, h, i.observe(msg, consumer, id, ModeTransaction))
}

func (i *Inbox) applyOwnObserved(msg *message.Message, consumer, id string, h message.HandlerFunc, ob *observed) ([]*message.Message, error) {
	produced, err := i.applyOwnOnce(msg, consumer, id, h, ob)
	if errors.Is(err, store.ErrStaleConsumer) { // before h ran; the claim goes with the id the name has now
		i.cfg.logger.Info("Inbox registers its consumers again: the consumers table was made anew",
			logFields(msg, consumer, id).Add(watermill.LogFields{"error": err.Error()}))
		produced, err = i.applyOwnOnce(msg, consumer, id, h, ob)
	}
	for try := 1; errors.Is(err, store.ErrClaimLostLock) && try < claimTries; try++ { // before h ran: the attempt again
		i.cfg.logger.Debug("Inbox claims again: the claim lost a lock conflict", logFields(msg, consumer, id).Add(
			watermill.LogFields{"error": err.Error()}))
		_ = sleepThen(msg.Context(), time.Duration(try)*claimBackoff, nil)
		produced, err = i.applyOwnOnce(msg, consumer, id, h, ob)
	}
	// The new id was stale too (the table is being made anew again), or every claim lost its lock conflict.
	if errors.Is(err, store.ErrStaleConsumer) || errors.Is(err, store.ErrClaimLostLock) {
		err = i.settle(msg, consumer, err)
		ob.finish(err)
	}
	return produced, err
}

func (i *Inbox) applyOwnOnce(msg *message.Message, consumer, id string, h message.HandlerFunc, ob *observed) ([]*message.Message, error) {
	ctx := msg.Context()
	tx, viewed, err := i.beginOwn(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: begin %s/%s: %w", consumer, id, err)
	}
	if viewed {
		var viewCtx context.Context
		viewCtx, h = withOwnView(ctx, tx, refusingStmtsOfAnotherDB(h))
		msg.SetContext(viewCtx)
		defer msg.SetContext(ctx)
	}
	ended := false
	rollback := func() {
		if !ended {
			ended = true
			i.rollbackFailed(msg, consumer, id, "rollback", dialect.RollbackErr(tx.Rollback(ctx)))
		}
	}
	defer rollback() // runs on a panic too, so a panicking handler leaves no claim behind
	produced, skipped, err := i.apply(tx, store.StateDone, msg, consumer, id, h, ob)
	if err != nil || skipped {
		rollback() // before any wait of settle's, so the claim's lock is not held through it
		if errors.Is(err, store.ErrStaleConsumer) || errors.Is(err, store.ErrClaimLostLock) {
			return nil, err // applyOwnObserved goes again
		}
		err = i.settle(msg, consumer, err)
		ob.finish(err)
		return produced, err
	}
	start := time.Now()
	err = tx.Commit(ctx)
	ended = true
	return committed(ob, start, err, consumer, id, produced)
}

// committed reports a commit that began at start and ended with err, and returns what the router gets: the
// produced messages, or the commit's error.
func committed(ob *observed, start time.Time, err error, consumer, id string, produced []*message.Message) ([]*message.Message, error) {
	ob.commitDone(start, err)
	if err != nil {
		err = fmt.Errorf("inbox: commit %s/%s: %w", consumer, id, err)
		produced = nil
	}
	ob.finish(err)
	return produced, err
}

// apply claims (consumer, id) in tx, as state, and runs h if the claim is new. skipped reports that h did not run
// and tx holds nothing to commit: on a duplicate, apply returns the messages stored when the message was first
// applied. A message the inbox cannot apply (an ID the database refused, produced messages it cannot store) comes
// back as an unusable error, for settle once the transaction is rolled back.
func (i *Inbox) apply(tx driver.Tx, state string, msg *message.Message, consumer, id string, h message.HandlerFunc, ob *observed) (produced []*message.Message, skipped bool, err error) {
	ctx := msg.Context()
	ob.claiming()
	claimed, err := i.store.Claim(ctx, tx, consumer, id, state)
	if errors.Is(err, store.ErrStaleConsumer) && state == store.StateApplying { // a subscriber's snapshot, older than the registration?
		claimed, err = i.store.ClaimFresh(ctx, tx, consumer, id, state)
	}
	switch {
	case errors.Is(err, ErrInvalidEventID):
		return nil, true, unusable{err}
	case err != nil && state == store.StateApplying && store.IsConflict(err):
		return i.skipCommitted(msg, consumer, id, err, ob)
	case err != nil:
		return nil, false, err
	case !claimed:
		if claimed, produced, err = i.existing(msg, tx, consumer, id, state, ob); !claimed {
			return produced, true, err
		}
	}

	if err := i.store.SaveFingerprint(ctx, tx, consumer, id, i.fingerprintOf(msg)); err != nil {
		return nil, false, err
	}
	msg.SetContext(withClaim(ob.claimed(1), tx, id))
	defer msg.SetContext(ctx) // the transaction ends with this call; nothing after it may reach it
	produced, err = ob.run(h, msg)
	if err != nil {
		return nil, false, i.store.Explain(err) // the handler's statements meet a pooler as the inbox's do
	}
	stampProduced(produced, consumer, id, i.cfg.idKey)
	raw, err := store.EncodeProduced(consumer, id, produced)
	if err == nil && state == store.StateApplying {
		err = i.store.Finish(ctx, tx, consumer, id, raw)
	} else if err == nil {
		err = i.store.SaveProduced(ctx, tx, consumer, id, raw)
	}
	if errors.Is(err, ErrProducedUnstorable) {
		return nil, true, unusable{err}
	}
	if err != nil {
		return nil, false, err
	}
	return produced, false, nil
}

// rollbackFailed logs a rollback that failed. Once the message's context has ended (a router closing, a deadline)
// database/sql and the driver end the transaction themselves and report the cancellation, often as a bad
// connection: that is no fault, so it is logged at debug level, not as an error.
func (i *Inbox) rollbackFailed(msg *message.Message, consumer, id, what string, err error) {
	switch {
	case err == nil:
	case msg.Context().Err() != nil:
		i.cfg.logger.Debug("Inbox "+what+" ended with the message's context", logFields(msg, consumer, id).Add(watermill.LogFields{"error": err.Error()}))
	default:
		i.cfg.logger.Error("Inbox "+what+" failed", err, logFields(msg, consumer, id))
	}
}

func logFields(msg *message.Message, consumer, id string) watermill.LogFields {
	return watermill.LogFields{"message_uuid": msg.UUID, "consumer": consumer, "event_id": id}
}

// unusable carries why a message can never be applied, from apply to settle.
type unusable struct{ error }

func (u unusable) Unwrap() error { return u.error }

// settle returns err for the router, once apply's transaction or savepoint is rolled back: an unusable message is
// rejected (dead-lettered, or nacked after the reject delay), a missing table or a consumer name the table has no
// id left for holds the message back for the reject delay; anything else goes on as it is.
func (i *Inbox) settle(msg *message.Message, consumer string, err error) error {
	var u unusable
	switch {
	case errors.As(err, &u):
		return i.reject(msg, consumer, u.error)
	// Faults of the table or of the wiring, not of the message's, held back so that the redelivery does not spin: a
	// missing table, a consumer name the table has no id left for, a handler helper of the other client library, a
	// connection whose session encoding would change the ID, and a claim whose retry with the id the name has now
	// found that one stale too (the consumers table is being made anew again).
	case errors.Is(err, ErrSchemaMissing), errors.Is(err, ErrConsumerIDsExhausted), errors.Is(err, ErrNoTx),
		errors.Is(err, store.ErrStaleConsumer), errors.Is(err, ErrClientEncoding):
		return i.holdBack(msg, err)
	}
	return err
}

// applyInSubscriberTx runs apply in a savepoint of watermill-sql's subscriber transaction, which that subscriber
// commits after the ack. Its v3 subscriber redelivers a nacked message in the same transaction instead of rolling
// it back, so without the savepoint a failed attempt's claim and writes would commit with the redelivery, and one
// failed statement would leave every redelivery in an aborted transaction. Rolling back to the savepoint before
// the nack undoes both, and releasing it then keeps redeliveries from nesting savepoints without end. The
// subscriber also commits when it closes or its ack deadline passes, handler running or not; the claim is
// therefore made 'applying' and turned 'done' only on success, and a deferred trigger fails a commit that finds it
// 'applying' (migrations/003_applying_guard.up.sql).
func (i *Inbox) applyInSubscriberTx(tx driver.Tx, msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	ctx := msg.Context()
	if err := i.store.Savepoint(ctx, tx, dialect.SetSavepoint); err != nil {
		return nil, fmt.Errorf("inbox: savepoint %s/%s: %w", consumer, id, err)
	}
	ended := false
	rollback := func() {
		if ended {
			return
		}
		ended = true
		bg := context.WithoutCancel(ctx)
		err := i.store.Savepoint(bg, tx, dialect.RollbackSavepoint)
		if err == nil {
			err = i.store.Savepoint(bg, tx, dialect.ReleaseSavepoint)
		}
		i.rollbackFailed(msg, consumer, id, "rollback to savepoint", dialect.RollbackErr(err))
	}
	defer rollback() // runs on a panic too
	if err := i.checkJoinedDatabase(ctx, tx, message.HandlerNameFromCtx(ctx)); err != nil {
		rollback()
		if errors.Is(err, ErrInvalidOption) {
			return nil, i.holdBack(msg, err) // a fault of the configuration, not of the message
		}
		return nil, err
	}
	ob := i.observe(msg, consumer, id, ModeJoined)
	produced, skipped, err := i.apply(tx, store.StateApplying, msg, consumer, id, h, ob)
	if err != nil || skipped {
		rollback()
		err = i.settle(msg, consumer, err)
		ob.finish(err)
		return produced, err
	}
	start := time.Now()
	err = i.store.Savepoint(ctx, tx, dialect.ReleaseSavepoint)
	ob.commitDone(start, err)
	if err != nil {
		err = fmt.Errorf("inbox: release savepoint %s/%s: %w", consumer, id, err)
		ob.finish(err)
		return nil, err
	}
	ended = true
	ob.finish(nil)
	return produced, nil
}

// existing handles a claim that found the row already there. A finished row is a duplicate, whose produced
// messages go out again, and a dead-lettered one is acked. A row lease mode left free (released, or with an
// expired lease) is taken over and claimed reports true: a consumer may switch modes, and neither mode leaves the
// other a row it cannot finish. A live lease is waited for.
func (i *Inbox) existing(msg *message.Message, tx driver.Tx, consumer, id, state string, ob *observed) (claimed bool, produced []*message.Message, err error) {
	ctx := msg.Context()
	current, produced, err := i.store.Produced(ctx, tx, consumer, id)
	if err != nil {
		return false, nil, err
	}
	read := func() ([]byte, error) { return i.store.ReadFingerprint(ctx, tx, consumer, id) }
	if done, err := i.skipped(msg, consumer, id, current, ob, read); done {
		if err != nil {
			produced = nil
		}
		return false, produced, err
	}
	if current == store.StateReleased || current == store.StateProcessing {
		if another, err := i.takenOverByAnother(msg, consumer, id, ob, read); another {
			return false, nil, err
		}
		took, err := i.store.TakeOver(ctx, tx, consumer, id, state)
		if err != nil || took {
			if took {
				i.cfg.logger.Info("Inbox took over a row lease mode left", logFields(msg, consumer, id).Add(watermill.LogFields{"state": current}))
			}
			return took, nil, err
		}
	}
	err = fmt.Errorf("%w: %s/%s is %s in lease mode", ErrLeaseHeld, consumer, id, current)
	return false, nil, sleepThen(ctx, leaseBusyCeiling, err)
}

// skipped reports whether a row in state ends the message without running the handler: 'done' (a duplicate, or,
// with WithFingerprint, another message under a reused ID, which checkCopy reads the fingerprint of with read) or
// 'failed' (dead-lettered by lease mode). A conflict to dead-letter comes back as an unusable error.
func (i *Inbox) skipped(msg *message.Message, consumer, id, state string, ob *observed, read func() ([]byte, error)) (bool, error) {
	switch state {
	case store.StateDone:
		if err := i.checkCopy(msg, consumer, id, ob.mode, read); err != nil {
			return true, err
		}
		i.cfg.logger.Info("skipped duplicate", logFields(msg, consumer, id))
		ob.skipped()
		return true, nil
	case store.StateFailed:
		i.cfg.logger.Info("skipped dead-lettered message", logFields(msg, consumer, id))
		return true, nil
	}
	return false, nil
}

// skipCommitted handles a claim in watermill-sql's subscriber transaction that failed with a serialization
// failure. That subscriber reads under REPEATABLE READ, and PostgreSQL refuses an insert that conflicts with a row
// committed after the transaction's snapshot: another transaction claimed the same consumer and ID meanwhile (a
// second consumer group sharing this consumer name, or a copy consumed elsewhere). Every redelivery in this
// transaction would fail the same way until the subscriber's ack deadline, so the row is read outside the snapshot
// instead: a finished row makes the message a duplicate, as it would be had the other commit come first.
func (i *Inbox) skipCommitted(msg *message.Message, consumer, id string, cause error, ob *observed) ([]*message.Message, bool, error) {
	ctx := msg.Context()
	state, produced, err := i.store.Committed(ctx, i.db.pool, consumer, id)
	if err != nil {
		return nil, false, errors.Join(cause, err)
	}
	i.cfg.logger.Debug("Inbox claim conflicts with a row committed after the subscriber's snapshot; read it outside",
		logFields(msg, consumer, id).Add(watermill.LogFields{"state": state}))
	if done, err := i.skipped(msg, consumer, id, state, ob, i.committedFingerprint(ctx, consumer, id)); done {
		if err != nil {
			produced = nil
		}
		return produced, true, err
	}
	err = fmt.Errorf("%w: %s/%s is %s, claimed after this subscriber's snapshot", ErrLeaseHeld, consumer, id, state)
	return nil, true, sleepThen(ctx, leaseBusyCeiling, err)
}
