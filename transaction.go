package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

// applyOwn applies msg in a transaction of its own: begin, claim, run h, commit.
func (i *core) applyOwn(msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	return i.applyOwnObserved(msg, consumer, id, h, i.observe(msg, consumer, id, observe.ModeTransaction))
}

func (i *core) applyOwnObserved(msg *message.Message, consumer, id string, h message.HandlerFunc, ob *observed) ([]*message.Message, error) {
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

func (i *core) applyOwnOnce(msg *message.Message, consumer, id string, h message.HandlerFunc, ob *observed) ([]*message.Message, error) {
	ctx := msg.Context()
	tx, viewed, err := i.beginOwn(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox: begin %s/%s: %w", consumer, id, err)
	}
	if viewed {
		var viewCtx context.Context
		viewCtx, h = withOwnView(ctx, &i.db.caps, tx, refusingStmtsOfAnotherDB(h))
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
	return commitEnded(ob, start, err, consumer, id, produced)
}

// beginOwn begins a message's own transaction. Its handler gets a view that refuses Commit and Rollback
// (withOwnView) in batch mode, as a batch member's does, and on a server that can end a transaction under a failed
// statement (dialect.TxEnder), whose view refuses every statement after it; viewed reports that it does.
func (i *core) beginOwn(ctx context.Context) (tx driver.Tx, viewed bool, err error) {
	return i.db.beginHandlerTx(ctx, i.batches != nil)
}

// refusingStmtsOfAnotherDB returns h, whose error refusedStmtOfAnotherDB turns unusable.
func refusingStmtsOfAnotherDB(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		return refusedStmtOfAnotherDB(h(msg))
	}
}

// refusedStmtOfAnotherDB returns what a handler returned, its error made unusable (ErrStmtOfAnotherDB) when it is
// database/sql's refusal of a statement prepared on another *sql.DB: the handler's transaction is a view on the
// inbox's own pool, and the same handler would meet the same refusal on every redelivery. database/sql refuses it
// before any driver sees the statement, so its text is the only sign of it.
func refusedStmtOfAnotherDB(produced []*message.Message, err error) ([]*message.Message, error) {
	if err != nil && !errors.Is(err, ErrStmtOfAnotherDB) && strings.Contains(err.Error(), "Tx.Stmt: statement from different database used") {
		return nil, unusable{fmt.Errorf("%w: %w", ErrStmtOfAnotherDB, err)}
	}
	return produced, err
}
