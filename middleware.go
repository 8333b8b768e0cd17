package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Middleware wraps h so that each message is applied at most once per consumer. The path of one message:
//
//  1. Read the event ID; a message without a usable one is dead-lettered or nacked after a delay (dlq.go).
//  2. Begin a transaction, or join the one watermill-sql's subscriber carries.
//  3. Claim (consumer, ID) in the inbox table. If it was claimed before, skip h: roll back, and return the
//     messages h produced the first time so the router sends them again.
//  4. Run h with the transaction in its context (TxFromContext); h does its side effect on it.
//  5. Commit, and only then return, so the router acks after the effect is durable. An error, a panic or a
//     cancelled context rolls back the effect and the claim together, and the router nacks.
//
// In lease mode (WithLease) steps 2 to 5 are applyLeased's, in lease.go.
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
		if i.cfg.lease > 0 {
			return i.applyLeased(msg, consumer, id, h) // lease.go: for effects outside the database
		}
		if tx, ok := wsql.TxFromContext(ctx); ok && i.cfg.subscriberTx {
			return i.applyInSubscriberTx(tx, msg, consumer, id, h) // commits on the subscriber's ack
		}

		tx, err := i.db.BeginTx(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("inbox: begin %s/%s: %w", consumer, id, err)
		}
		committed := false
		defer func() { // runs on a panic too, so a panicking handler leaves no claim behind
			if !committed {
				if err := rollbackErr(tx.Rollback()); err != nil {
					i.cfg.logger.Error("Inbox rollback failed", err, logFields(msg, consumer, id))
				}
			}
		}()
		produced, skipped, err := i.apply(tx, stateDone, msg, consumer, id, h)
		if err != nil || skipped {
			return produced, err
		}
		if err := tx.Commit(); err != nil {
			return nil, fmt.Errorf("inbox: commit %s/%s: %w", consumer, id, err)
		}
		committed = true
		return produced, nil
	}
}

// apply claims (consumer, id) in tx, as state, and runs h if the claim is new. skipped reports that h did not run
// and tx holds nothing to commit: on a duplicate, apply returns the messages stored when the message was first
// applied; for an ID the database refused (a non-UUID for a uuid column), what reject returns.
func (i *Inbox) apply(tx *sql.Tx, state string, msg *message.Message, consumer, id string, h message.HandlerFunc) (produced []*message.Message, skipped bool, err error) {
	ctx := msg.Context()
	claimed, err := i.store.claim(ctx, tx, consumer, id, state)
	if errors.Is(err, ErrInvalidEventID) {
		return nil, true, i.reject(msg, consumer, err)
	}
	if err != nil {
		return nil, false, err
	}
	if !claimed {
		return i.skip(msg, tx, consumer, id)
	}

	i.cfg.observer.Claimed(consumer)
	msg.SetContext(withClaim(ctx, tx, id))
	defer msg.SetContext(ctx) // the transaction ends with this call; nothing after it may reach it
	produced, err = h(msg)
	if err != nil {
		return nil, false, err
	}
	if state != stateDone {
		if err := i.store.finish(ctx, tx, consumer, id); err != nil {
			return nil, false, err
		}
	}
	if len(produced) > 0 {
		stampEventIDs(produced, i.cfg.idKey)
		if err := i.store.saveProduced(ctx, tx, consumer, id, produced); err != nil {
			return nil, false, err
		}
	}
	return produced, false, nil
}

func logFields(msg *message.Message, consumer, id string) watermill.LogFields {
	return watermill.LogFields{"message_uuid": msg.UUID, "consumer": consumer, "event_id": id}
}

// applyInSubscriberTx runs apply in a savepoint of watermill-sql's subscriber transaction, which that subscriber
// commits after the ack. Its v3 subscriber redelivers a nacked message in the same transaction instead of rolling
// it back, so without the savepoint a failed attempt's claim and writes would commit with the redelivery, and one
// failed statement would leave every redelivery in an aborted transaction. Rolling back to the savepoint before
// the nack undoes both. It also commits when it closes or its ack deadline passes, handler running or not; the
// claim is therefore made 'applying' and turned 'done' only on success, and a deferred trigger fails a commit that
// finds it 'applying' (migrations/003_applying_guard.up.sql).
func (i *Inbox) applyInSubscriberTx(tx *sql.Tx, msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	ctx := msg.Context()
	if _, err := tx.ExecContext(ctx, savepointSQL); err != nil {
		return nil, fmt.Errorf("inbox: savepoint %s/%s: %w", consumer, id, err)
	}
	released := false
	defer func() { // runs on a panic too
		if !released {
			if _, err := tx.ExecContext(context.WithoutCancel(ctx), rollbackSavepointSQL); rollbackErr(err) != nil {
				i.cfg.logger.Error("Inbox rollback to savepoint failed", err, logFields(msg, consumer, id))
			}
		}
	}()
	produced, skipped, err := i.apply(tx, stateApplying, msg, consumer, id, h)
	if err != nil || skipped {
		return produced, err
	}
	if _, err := tx.ExecContext(ctx, releaseSavepointSQL); err != nil {
		return nil, fmt.Errorf("inbox: release savepoint %s/%s: %w", consumer, id, err)
	}
	released = true
	return produced, nil
}

// skip handles a claim that found the row already there: a duplicate, whose produced messages go out again, or a
// row of lease mode on the same table (dead-lettered, or claimed and not done), which this mode cannot finish.
func (i *Inbox) skip(msg *message.Message, tx *sql.Tx, consumer, id string) ([]*message.Message, bool, error) {
	state, produced, err := i.store.produced(msg.Context(), tx, consumer, id)
	switch {
	case err != nil:
		return nil, true, err
	case state == stateDone:
		i.cfg.logger.Info("skipped duplicate", logFields(msg, consumer, id))
		i.cfg.observer.DuplicateSkipped(consumer)
		return produced, true, nil
	case state == stateFailed:
		i.cfg.logger.Info("skipped dead-lettered message", logFields(msg, consumer, id))
		return nil, true, nil
	}
	err = fmt.Errorf("%w: %s/%s is %s in lease mode", ErrLeaseHeld, consumer, id, state)
	return nil, true, sleepThen(msg.Context(), leaseBusyCeiling, err)
}
