package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// Over lib/pq a transaction holds a connection of its own from the pool and gives it back when it ends. On a pool
// of one connection (three in batch mode), every way a message can end (applied, a copy, a handler's error or panic, a statement the
// database refuses, a commit that fails, a context cancelled mid-handler) must give it back: one that did not
// would leave the next message waiting for a connection that never comes.
func TestLibpq_EveryWayAMessageEndsGivesItsConnectionBack(t *testing.T) {
	t.Parallel()
	modes := []struct {
		name string
		opts []inbox.Option
		pool int      // connections; batch mode keeps two free for what handlers take outside its transaction
		ends []string // the ends the mode has: lease mode's handler runs outside any transaction
	}{
		{"transaction", nil, 1, []string{"applied", "error", "panic", "refused", "commit fails", "cancelled"}},
		{"batch", []inbox.Option{inbox.WithBatch(time.Millisecond, 8)}, 3, []string{"applied", "error", "panic", "refused", "commit fails", "cancelled"}},
		{"lease", []inbox.Option{inbox.WithLease(time.Minute)}, 1, []string{"applied", "error", "panic", "cancelled"}},
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			db := openDB(t) // the inbox's own pool: a connection it kept would not hold up the test's statements
			db.SetMaxOpenConns(mode.pool)
			ib, err := inbox.New(db, append([]inbox.Option{inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits")}, mode.opts...)...)
			require.NoError(t, err)
			// A deferred unique constraint fails at COMMIT, after the handler returned.
			_, err = b.db.Exec(`CREATE TABLE ` + b.Accounts + `_once (n int UNIQUE DEFERRABLE INITIALLY DEFERRED)`)
			require.NoError(t, err)
			t.Cleanup(func() { _, _ = b.db.Exec(`DROP TABLE IF EXISTS ` + b.Accounts + `_once`) })

			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				ctx := msg.Context()
				var run func(string) error
				if tx, ok := inbox.TxFromContext(ctx); ok {
					run = func(q string) error { _, err := tx.ExecContext(ctx, q); return err }
				} else {
					run = func(q string) error { _, err := b.db.ExecContext(ctx, q); return err }
				}
				if err := run(`UPDATE ` + b.Accounts + ` SET balance = balance + 1 WHERE id = 1`); err != nil {
					return nil, err
				}
				switch msg.Metadata.Get("end") {
				case "error":
					return nil, errors.New("the handler failed")
				case "panic":
					panic("the handler panicked")
				case "refused":
					return nil, run(`SELECT 1/0`)
				case "commit fails":
					return nil, run(`INSERT INTO ` + b.Accounts + `_once VALUES (1), (1)`)
				case "cancelled": // the router closing, say
					ctx.Value(cancelKey{}).(context.CancelFunc)()
					return nil, ctx.Err()
				}
				return nil, nil
			})
			// Each message goes with three that succeed, all at once, so that in batch mode they share a batch,
			// and then again, as copies.
			for n, end := range mode.ends {
				for copyOf := range 2 {
					errs := make([]error, 4)
					var wg sync.WaitGroup
					for k := range errs {
						msg := newMsg(fmt.Sprintf("evt-%d-%d", n, k))
						if k == 0 {
							msg.Metadata.Set("end", end)
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
							defer cancel()
							msg.SetContext(context.WithValue(ctx, cancelKey{}, cancel))
							_, errs[k] = handleRecovering(h, msg)
							if errors.Is(ctx.Err(), context.DeadlineExceeded) {
								errs[k] = fmt.Errorf("waited 10 s: %w", errs[k])
							}
						}()
					}
					what := fmt.Sprintf("%s, %s (copy %d)", mode.name, end, copyOf)
					all := make(chan struct{})
					go func() { wg.Wait(); close(all) }()
					select {
					case <-all:
					case <-time.After(30 * time.Second):
						t.Fatalf("%s: the messages still wait for a connection after 30 s; %d of %d in use", what,
							db.Stats().InUse, mode.pool)
					}
					if end == "applied" {
						require.NoError(t, errs[0], what)
					} else {
						require.Error(t, errs[0], what)
					}
					for _, err := range errs[1:] {
						if end != "commit fails" || mode.name != "batch" { // a batch's failed commit nacks all of it
							require.NoError(t, err, what)
						}
					}
					// A batch ends on its own goroutine: when every member it claimed failed, the last one's call
					// returns before the batch's rollback gives the connection back (the copies beside it, ended by
					// the batch's claim, do not wait for it either).
					require.Eventually(t, func() bool { return db.Stats().InUse == 0 }, 5*time.Second, time.Millisecond,
						"%s: every connection went back; %d in use", what, db.Stats().InUse)
				}
			}
			_, err = handleRecovering(h, newMsg("last"))
			require.NoError(t, err, "the pool still serves")
			if mode.name != "lease" { // whose handler credits outside the inbox's transaction
				require.Equal(t, b.Rows(t, "wallet-credits"), b.Balance(t), "what failed left neither its claim nor its credit")
			}
		})
	}
}

type cancelKey struct{}

// handleRecovering runs h on msg and returns a panic as an error, as the router's Recoverer would.
func handleRecovering(h message.HandlerFunc, msg *message.Message) (_ []*message.Message, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return h(msg)
}
