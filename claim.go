package inbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/internal/text"
)

// identify returns the consumer scope and event ID of msg, or why the inbox cannot apply it.
func (i *core) identify(msg *message.Message) (consumer, id string, err error) {
	consumer = i.cfg.consumer
	if consumer == "" {
		consumer = message.HandlerNameFromCtx(msg.Context())
	}
	if consumer == "" {
		return "", "", ErrNoConsumer
	}
	if i.cfg.useUUID {
		id = msg.UUID
	} else {
		var ok bool
		if id, ok = msg.Metadata[i.cfg.idKey]; !ok {
			return consumer, "", fmt.Errorf("%w: metadata key %q is not set", ErrMissingEventID, i.cfg.idKey)
		}
	}
	if err := i.validateID(id); err != nil {
		return consumer, id, err
	}
	// The type is the table's, learned before the first message, never only the option's: an ID spelled two ways
	// that the uuid column stores as one must reach the handler, its keys and the logs as that one.
	if i.storedIDType() == IDTypeUUID {
		u, err := uuid.Parse(id)
		if err != nil {
			return consumer, id, fmt.Errorf("%w: %q is not a UUID, and the inbox stores UUIDs", ErrInvalidEventID, id)
		}
		id = u.String() // the form PostgreSQL returns, so logs and keys agree with the stored row
	}
	return consumer, id, nil
}

// validateID rejects what PostgreSQL's text type cannot hold or an index should not: an ID stored differently from
// the one sent would deduplicate nothing.
func (i *core) validateID(id string) error {
	if problem := text.Problem(id, i.cfg.maxIDLength); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidEventID, problem)
	}
	return nil
}

// A claim that lost a lock conflict (store.ErrClaimLostLock: a deadlock between waiting inserts, a lock timeout, a
// serialization failure) ran nothing, and is tried again in a new transaction, claimTries times in all, claimBackoff
// longer each time, before its error nacks the message.
const (
	claimTries   = 3
	claimBackoff = 10 * time.Millisecond
)

// commitEnded reports a commit that began at start and ended with err, and returns what the router gets: the
// produced messages, or the commit's error.
func commitEnded(ob *observed, start time.Time, err error, consumer, id string, produced []*message.Message) ([]*message.Message, error) {
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
func (i *core) apply(tx driver.Tx, state string, msg *message.Message, consumer, id string, h message.HandlerFunc, ob *observed) (produced []*message.Message, skipped bool, err error) {
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

// existing handles a claim that found the row already there. A finished row is a duplicate, whose produced
// messages go out again, and a dead-lettered one is acked. A row lease mode left free (released, or with an
// expired lease) is taken over and claimed reports true: a consumer may switch modes, and neither mode leaves the
// other a row it cannot finish. A live lease is waited for.
func (i *core) existing(msg *message.Message, tx driver.Tx, consumer, id, state string, ob *observed) (claimed bool, produced []*message.Message, err error) {
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
func (i *core) skipped(msg *message.Message, consumer, id, state string, ob *observed, read func() ([]byte, error)) (bool, error) {
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
func (i *core) skipCommitted(msg *message.Message, consumer, id string, cause error, ob *observed) ([]*message.Message, bool, error) {
	ctx := msg.Context()
	state, produced, err := i.store.ReadOutsideSnapshot(ctx, i.db.pool, consumer, id)
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

const (
	// leaseBusyFloor and leaseBusyCeiling bound the wait before a copy that found a live lease is nacked. The
	// floor keeps a lease about to end from turning the wait into a hot loop; the ceiling lets the copy look
	// again soon, since the holder usually finishes long before its lease would end: one indexed read a second
	// per waiting copy, instead of a partition held up for a whole lease.
	leaseBusyFloor   = 100 * time.Millisecond
	leaseBusyCeiling = time.Second
)
