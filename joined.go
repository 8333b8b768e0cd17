package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

// applyInSubscriberTx runs apply in a savepoint of watermill-sql's subscriber transaction, which that subscriber
// commits after the ack. Its v3 subscriber redelivers a nacked message in the same transaction instead of rolling
// it back, so without the savepoint a failed attempt's claim and writes would commit with the redelivery, and one
// failed statement would leave every redelivery in an aborted transaction. Rolling back to the savepoint before
// the nack undoes both, and releasing it then keeps redeliveries from nesting savepoints without end. The
// subscriber also commits when it closes or its ack deadline passes, handler running or not; the claim is
// therefore made 'applying' and turned 'done' only on success, and a deferred trigger fails a commit that finds it
// 'applying' (migrations/003_applying_guard.up.sql).
func (i *core) applyInSubscriberTx(tx driver.Tx, msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
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
	ob := i.observe(msg, consumer, id, observe.ModeJoined)
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
