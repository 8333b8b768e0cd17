package inbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/batch"
	"github.com/effectively-once/watermill-inbox/internal/fingerprint"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/internal/text"
	"github.com/effectively-once/watermill-inbox/observe"
)

// The steps every mode takes with one message: read its event ID, begin the transaction its claim goes in, claim
// (consumer, ID), skip a copy (checking its fingerprint), and stamp the messages its handler produced.

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
	msg.SetContext(withClaim(ob.claimed(1), &claimValue{tx: tx, id: id}))
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

// fingerprintOf returns msg's fingerprint, or nil without WithFingerprint.
func (i *core) fingerprintOf(msg *message.Message) []byte {
	if i.cfg.fingerprint == nil {
		return nil
	}
	return fingerprint.Of(msg.Payload, msg.Metadata.Get, i.cfg.fingerprint.MetadataKeys)
}

// checkCopy compares a copy of an applied message with the fingerprint stored with its row, which read returns,
// and, when they differ, reports the conflict and returns the error that ends the copy: an unusable one, which
// settle dead-letters, when the options say so; nil when the copy is skipped, as a copy is.
func (i *core) checkCopy(msg *message.Message, consumer, id string, mode observe.Mode, read func() ([]byte, error)) error {
	theirs := i.fingerprintOf(msg)
	if theirs == nil {
		return nil
	}
	stored, err := read()
	if err != nil {
		return fmt.Errorf("inbox: read the fingerprint of %s/%s: %w", consumer, id, err)
	}
	if !fingerprint.Conflicts(stored, theirs) {
		return nil
	}
	e := observe.ConflictEvent{Consumer: consumer, EventID: id, Mode: mode, Message: msg, Stored: fingerprint.String(stored),
		Received: fingerprint.String(theirs), DeadLettered: i.cfg.fingerprint.DeadLetter}
	cause := fmt.Errorf("%w: %s/%s was applied for a message with fingerprint %s, and this one has %s", ErrFingerprintConflict,
		consumer, id, e.Stored, e.Received)
	i.cfg.logger.Error("Inbox found an event ID reused for another message", cause, logFields(msg, consumer, id).Add(
		watermill.LogFields{"stored_fingerprint": e.Stored, "received_fingerprint": e.Received, "dead_lettered": e.DeadLettered}))
	i.cfg.observer.FingerprintConflict(msg.Context(), e)
	if e.DeadLettered {
		return unusable{cause}
	}
	return nil
}

// committedFingerprint returns a read of the fingerprint stored with the row of (consumer, id) in a short
// transaction of its own, for a copy that has no transaction of the inbox's to read it in.
func (i *core) committedFingerprint(ctx context.Context, consumer, id string) func() ([]byte, error) {
	return func() (f []byte, err error) {
		err = store.InShortTx(ctx, i.db.pool, i.store.Dialect(), func(tx driver.Tx) error {
			f, err = i.store.ReadFingerprint(ctx, tx, consumer, id)
			return err
		})
		return f, err
	}
}

// takenOverByAnother reports, for a copy that would take over a row left unfinished (a lease released or run
// out, a row lease mode left), whether the row carries the fingerprint of another message, which read returns.
// Such a copy is a reused event ID as the copy of a finished row is: reported, then skipped, or dead-lettered with
// the unusable error returned, and its handler never runs; the row stays for its own message's copies.
func (i *core) takenOverByAnother(msg *message.Message, consumer, id string, ob *observed, read func() ([]byte, error)) (bool, error) {
	theirs := i.fingerprintOf(msg)
	if theirs == nil {
		return false, nil
	}
	stored, err := read()
	if err != nil {
		return true, fmt.Errorf("inbox: read the fingerprint of %s/%s: %w", consumer, id, err)
	}
	if !fingerprint.Conflicts(stored, theirs) {
		return false, nil
	}
	if err := i.checkCopy(msg, consumer, id, ob.mode, func() ([]byte, error) { return stored, nil }); err != nil {
		return true, err
	}
	i.cfg.logger.Info("skipped a message whose event ID another message's unfinished row holds", logFields(msg, consumer, id))
	ob.skipped()
	return true, nil
}

// producedNamespace is the name-space UUID of the produced messages' name-based (version 5) UUIDs. It is part of
// the identities downstream consumers store, so it never changes.
var producedNamespace = uuid.MustParse("86fc1d95-ba6a-4a53-91d3-3c0816205fe5")

// ProducedMessageUUID returns the UUID the inbox gives the message at position (from 0) of those a handler returned
// for consumer and event ID: a name-based UUID (version 5, SHA-1) in a name space of the library's own, over the
// consumer, the event ID and the position, each length-prefixed so that no two triples share a name. The same
// triple always yields the same UUID, in every mode and every version of the library, so a produced message sent
// again (after a lost commit, a crash, a failed publish, a replay of the stored messages) carries the identity it
// had the first time, and the next consumer's inbox recognises it.
func ProducedMessageUUID(consumer, eventID string, position int) string {
	name := make([]byte, 0, 3*binary.MaxVarintLen64+len(consumer)+len(eventID))
	name = binary.AppendUvarint(name, uint64(len(consumer)))
	name = append(name, consumer...)
	name = binary.AppendUvarint(name, uint64(len(eventID)))
	name = append(name, eventID...)
	name = binary.AppendUvarint(name, uint64(position))
	return uuid.NewSHA1(producedNamespace, name).String()
}

// stampProduced gives each produced message its deterministic UUID and, under idKey, an event ID: the UUID, unless
// the handler set one itself (it must then derive it from its input, or copies will carry different IDs).
func stampProduced(msgs []*message.Message, consumer, id, idKey string) {
	for pos, m := range msgs {
		if m == nil {
			continue
		}
		m.UUID = ProducedMessageUUID(consumer, id, pos)
		if idKey == "" {
			continue
		}
		if m.Metadata == nil {
			m.Metadata = make(message.Metadata)
		}
		if m.Metadata.Get(idKey) == "" {
			m.Metadata.Set(idKey, m.UUID)
		}
	}
}

type ctxKey int

const (
	claimKey ctxKey = iota // a *claimValue
	viewKey
)

// claimValue is what the context of a claimed message's handler holds: the transaction that holds its row (nil in
// lease mode, which runs the handler outside any) and its event ID. One value, so that a claim costs the context one
// link.
type claimValue struct {
	tx driver.Tx
	id string
}

// withOwnView returns ctx with the view of tx that the handler of a message that goes alone gets in batch mode
// (batch.AloneView), when the adapter gives views (caps, the Database's), and h made to end the view when it
// returns.
func withOwnView(ctx context.Context, caps *driver.TxCaps, tx driver.Tx, h message.HandlerFunc) (context.Context, message.HandlerFunc) {
	v := batch.NewAloneView(caps, tx)
	if v == nil {
		return ctx, h
	}
	return context.WithValue(ctx, viewKey, v), func(msg *message.Message) ([]*message.Message, error) {
		defer v.End()
		return h(msg)
	}
}

func withClaim(ctx context.Context, c *claimValue) context.Context {
	return context.WithValue(ctx, claimKey, c)
}

// claimOf returns the claim ctx holds, or nil.
func claimOf(ctx context.Context) *claimValue {
	c, _ := ctx.Value(claimKey).(*claimValue)
	return c
}

// beginHandlerTx begins the transaction a handler runs in: one that gives each handler a view of its own
// (driver.SharedPool) when shared is set or the server can end a transaction under a failed statement
// (dialect.TxEnder), and a plain one otherwise; pgx's plain one gives views too (driver.TxCaps.MemberView). viewed
// reports that the handler is to get a view (batch.NewAloneView).
func (d *Database) beginHandlerTx(ctx context.Context, shared bool) (tx driver.Tx, viewed bool, err error) {
	var opts driver.TxOptions
	if d.ender != nil {
		if opts.Ends, err = d.endsTx(ctx); err != nil {
			return nil, false, err
		}
	}
	if d.shared != nil && (shared || opts.Ends != nil) {
		tx, err := d.shared.BeginShared(ctx, opts)
		return tx, true, err
	}
	tx, err = d.pool.Begin(ctx, opts)
	return tx, shared, err
}

// endsTx returns the dialect's test of the errors that end a transaction under a statement, asking the server
// once per Database; a failed ask is asked again by the next transaction.
func (d *Database) endsTx(ctx context.Context) (func(error) bool, error) {
	if ends := d.ends.Load(); ends != nil {
		return *ends, nil
	}
	tx, err := d.pool.Begin(ctx, driver.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	ends, err := d.ender.EndsTx(ctx, tx)
	_ = tx.Rollback(ctx) // it only read
	if err != nil {
		return nil, err
	}
	d.ends.Store(&ends)
	return ends, nil
}
