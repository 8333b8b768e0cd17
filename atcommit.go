package inbox

import (
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

// applyAtCommit applies msg with its claim sent after the handler, in one round trip with COMMIT
// (WithClaimAtCommit): begin, run h, store what it produced, then claim and commit. Any attempt that does not get as
// far as the COMMIT (the claim found the ID's row, the database refused the ID, h failed or panicked, the connection
// was lost) is rolled back, h's effect with it, and the message goes the usual way, claim first: a copy is then
// skipped as a duplicate, and anything else is applied or settled as without the option. A COMMIT that fails after
// the claim was made is reported as the usual commit is.
func (i *core) applyAtCommit(msg *message.Message, consumer, id string, h message.HandlerFunc) ([]*message.Message, error) {
	ctx := msg.Context()
	ob := i.observe(msg, consumer, id, observe.ModeTransaction)
	claim, args, err := i.store.ClaimAtCommit(ctx, consumer, id)
	if err != nil {
		return nil, i.settle(msg, consumer, err)
	}
	tx, err := i.db.pool.Begin(ctx, driver.TxOptions{})
	if err != nil {
		return nil, fmt.Errorf("inbox: begin %s/%s: %w", consumer, id, err)
	}

	ob.claiming()
	produced, ran, start, err := i.runThenClaim(msg, consumer, id, h, tx, ob, claim, args)
	if !ran {
		i.rollbackFailed(msg, consumer, id, "rollback", dialect.RollbackErr(tx.Rollback(ctx)))
		produced, err = i.applyOwnObserved(msg, consumer, id, h, ob)
		ob.finish(err) // the usual way finishes only what it claimed; this message was claimed above
		return produced, err
	}
	return commitEnded(ob, start, err, consumer, id, produced)
}

// runThenClaim runs h on tx, stores what it produced, and sends the claim with COMMIT, through the pool's
// CommitWith (driver.TxCaps), which New checked the pool has. ran reports that the claim was made, and err is then
// the COMMIT's; otherwise nothing committed, and a panic of h's is taken as a failure of this attempt (the usual way
// runs h again, and lets a second panic through).
func (i *core) runThenClaim(msg *message.Message, consumer, id string, h message.HandlerFunc, tx driver.Tx,
	ob *observed, claim string, args []any) (produced []*message.Message, ran bool, start time.Time, err error) {
	ctx := msg.Context()
	defer func() {
		msg.SetContext(ctx) // the transaction ends with this attempt; nothing after it may reach it
		if r := recover(); r != nil {
			produced, ran = nil, false
		}
	}()
	msg.SetContext(withClaim(ob.claimed(1), &claimValue{tx: tx, id: id}))
	if produced, err = h(msg); err != nil {
		return nil, false, start, err
	}
	stampProduced(produced, consumer, id, i.cfg.idKey)
	raw, err := store.EncodeProduced(consumer, id, produced)
	if err == nil {
		err = i.store.SaveProduced(ctx, tx, consumer, id, raw)
	}
	if err != nil {
		return nil, false, start, err
	}
	start = time.Now()
	ran, err = i.db.caps.CommitWith(ctx, tx, claim, args...)
	return produced, ran, start, err
}
