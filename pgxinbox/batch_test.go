package pgxinbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// On pgx, a batch member's savepoint waits for the member's first statement and goes with it. A member that fails
// after its predecessor in the batch succeeded rolls back only what it did, whether it ran no statement (its
// savepoint never went: rolling back to the last one sent would undo the predecessor's credit), a statement
// without arguments (which cannot carry the savepoint: it goes alone first), or one with arguments.
func TestBatch_AFailingMemberRollsBackOnlyItsOwnWork(t *testing.T) {
	t.Parallel()
	for name, firstUse := range map[string]func(ctx context.Context, b *testBundle, tx pgx.Tx) error{
		"NoStatement": func(context.Context, *testBundle, pgx.Tx) error {
			return nil
		},
		"StatementWithoutArguments": func(ctx context.Context, b *testBundle, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + 100 WHERE id = 1`)
			return err
		},
		"StatementWithArguments": func(ctx context.Context, b *testBundle, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 100)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithBatch(50*time.Millisecond, 16), inbox.WithBatchConcurrency(1))...)
			require.NoError(t, err)
			release := make(chan struct{})
			firstDone := make(chan struct{})
			credit := b.Credit(1, nil)
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				ctx := msg.Context()
				switch msg.Metadata.Get(inbox.DefaultIDMetadataKey) {
				case "blocker": // holds the only batch slot until the others wait for one
					<-release
					return nil, nil
				case "first":
					out, err := credit(msg)
					close(firstDone)
					return out, err
				}
				<-firstDone // the first member holds the connection: this one takes it after the first is kept
				tx, ok := pgxinbox.TxFromContext(ctx)
				if !ok {
					return nil, errors.New("no pgx transaction in the handler's context")
				}
				if err := firstUse(ctx, b, tx); err != nil {
					return nil, err
				}
				return nil, errors.New("fails after its first use of the transaction")
			})
			blocker := make(chan error, 1)
			go func() { _, err := h(newMsg("blocker")); blocker <- err }()
			time.Sleep(20 * time.Millisecond)
			errs := map[string]error{}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, id := range []string{"first", "second"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := h(newMsg(id))
					mu.Lock()
					errs[id] = err
					mu.Unlock()
				}()
			}
			time.Sleep(100 * time.Millisecond) // let both queue behind the blocker's batch
			close(release)
			require.NoError(t, <-blocker)
			wg.Wait()

			require.NoError(t, errs["first"])
			require.ErrorContains(t, errs["second"], "fails after its first use")
			require.Equal(t, 1, b.Balance(t), "the first member's credit, and nothing of the second's")
			require.Equal(t, 2, b.Rows(t, "wallet-credits"), "the blocker's claim and the first's; the second gave its back")
		})
	}
}

// A batch member's handler that begins a nested transaction (a savepoint), swallows the failure of a statement in
// it and returns nil without rolling the savepoint back leaves the batch's transaction aborted, as a swallowed
// failure on the view itself does: the batch finds it the same way, and nacks that member alone. Every other
// message is applied once, at its first delivery, while copies of the swallowing message are redelivered as fast
// as they are nacked.
func TestBatch_AFailureSwallowedInsideANestedTransactionCostsOnlyItsOwnMessage(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithBatch(time.Millisecond, 16))...)
	require.NoError(t, err)
	credit := b.Credit(1, nil)
	var swallowed atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) != "swallower" {
			return credit(msg)
		}
		ctx := msg.Context()
		tx, ok := pgxinbox.TxFromContext(ctx)
		if !ok {
			return nil, errors.New("no pgx transaction in the handler's context")
		}
		if _, err := tx.Exec(ctx, `UPDATE `+b.Accounts+` SET balance = balance + $1 WHERE id = 1`, 1); err != nil {
			return nil, err
		}
		nested, err := tx.Begin(ctx)
		if err != nil {
			return nil, err
		}
		// Account 1 exists: the insert fails, and the handler neither rolls the savepoint back nor says so.
		if _, err := nested.Exec(ctx, `INSERT INTO `+b.Accounts+` (id, balance) VALUES ($1, 0)`, 1); err != nil {
			swallowed.Add(1)
		}
		return nil, nil
	})

	stopCopies := inboxtest.RedeliverWhile(h, "swallower", 4)
	ids := inboxtest.EventIDs("evt", 120)
	_, errs := inboxtest.DeliverTogether(h, ids)
	accepted, swallowerErr := stopCopies()

	for _, id := range ids {
		require.NoError(t, errs[id], "%s is applied at its first delivery, whatever the swallowing message does", id)
	}
	require.Positive(t, swallowed.Load(), "the swallowing handler ran its failing statement")
	require.Zero(t, accepted, "the aborted transaction cannot commit the swallowing message")
	require.ErrorContains(t, swallowerErr, "returned nil after a statement on its transaction failed")
	require.Equal(t, len(ids), b.Balance(t), "the swallowing message's effect is rolled back")
	require.Equal(t, len(ids), b.Rows(t, "wallet-credits"))
}
