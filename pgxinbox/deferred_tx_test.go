package pgxinbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	// A message whose handler runs one statement: BEGIN and the claim, the handler's UPDATE, COMMIT.
	for _, mode := range []string{"cache_statement", "cache_describe", "exec", "simple_protocol"} {
		t.Run("AMessageCostsThreeRoundTripsIn_"+mode, func(t *testing.T) {
			t.Parallel()
			const messages = 20
			trips, b, _, _ := messagesOverCountedPool(t, queryExecModes[mode], messages)
			require.Equal(t, int64(3*messages), trips)
			require.Equal(t, messages+1, b.Balance(t))
		})
	}

	t.Run("ATransactionThatRanNothingCostsNone", func(t *testing.T) {
		t.Parallel()
		var trips tripCounter
		pool := openCountingPool(t, &trips, pgx.QueryExecModeCacheStatement)
		for _, end := range []func(driver.Tx) error{
			func(tx driver.Tx) error { return tx.Commit(context.Background()) },
			func(tx driver.Tx) error { return tx.Rollback(context.Background()) },
		} {
			trips.reset()
			tx, err := pgxinbox.Pool(pool).Begin(context.Background(), driver.TxOptions{})
			require.NoError(t, err)
			require.NoError(t, end(tx))
			require.Zero(t, trips.trips.Load())
			require.Zero(t, pool.Stat().AcquiredConns(), "the connection went back to the pool")
		}
	})
}

// TestDeferredBegin runs the same statements in pgx's own transaction and in the one the inbox begins, whose BEGIN
// waits for the first statement, and requires the same outcome of each statement and the same rows committed.
func TestDeferredBegin(t *testing.T) {
	t.Parallel()
	pool := openPool(t, testDSN())
	ctx := context.Background()
	table := inboxtest.UniqueName("deferred_begin")
	_, err := pool.Exec(ctx, `CREATE TABLE `+table+` (k text NOT NULL, id int NOT NULL, PRIMARY KEY (k, id))`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE `+table) })
	insert := `INSERT INTO ` + table + ` (k, id) VALUES ($1, $2)`

	begins := map[string]func(t *testing.T) pgx.Tx{
		"pgx": func(t *testing.T) pgx.Tx {
			tx, err := pool.BeginTx(ctx, pgx.TxOptions{})
			require.NoError(t, err)
			return tx
		},
		"inbox": func(t *testing.T) pgx.Tx {
			tx, err := pgxinbox.Pool(pool).Begin(ctx, driver.TxOptions{})
			require.NoError(t, err)
			return tx.Native().(pgx.Tx)
		},
	}
	type step func(tx pgx.Tx, k string) error
	scenarios := []struct {
		name  string
		steps []step
		want  []string // each step's outcome (see outcome)
		rows  []int    // the ids committed
		// Where the inbox's transaction differs, what it does instead.
		wantInbox []string
		rowsInbox []int
	}{{
		name: "AFirstStatementTheServerCannotPrepareFailsTheTransaction",
		steps: []step{
			func(tx pgx.Tx, k string) error {
				var n int
				return tx.QueryRow(ctx, `SELECT id FROM `+table+`_missing WHERE k = $1`, k).Scan(&n)
			},
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 1); return err },
			func(tx pgx.Tx, _ string) error { return tx.Commit(ctx) },
		},
		want: []string{"42P01", "25P02", "commit rolled back"},
	}, {
		name: "AFirstStatementFailingAsItRunsFailsTheTransaction",
		steps: []step{
			func(tx pgx.Tx, k string) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+table+` (k, id) VALUES ($1, $2::int / $3::int)`, k, 1, 0)
				return err
			},
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 2); return err },
			func(tx pgx.Tx, _ string) error { return tx.Commit(ctx) },
		},
		want: []string{"22012", "25P02", "commit rolled back"},
	}, {
		// The one difference: pgx closes the connection of a batch whose arguments it could not encode after it
		// queued part of it, here BEGIN. The inbox's own statements send strings and numbers, which always encode.
		name: "AnArgumentPgxCannotEncodeInTheFirstStatementClosesTheConnection",
		steps: []step{
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, make(chan int)); return err },
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 3); return err },
			func(tx pgx.Tx, _ string) error { return tx.Commit(ctx) },
		},
		want:      []string{"client error", "ok", "ok"},
		rows:      []int{3},
		wantInbox: []string{"client error", "client error", "client error"},
		rowsInbox: []int{},
	}, {
		name: "AFirstRowThatIsNotThereLeavesTheTransactionUsable",
		steps: []step{
			func(tx pgx.Tx, k string) error {
				var n int
				return tx.QueryRow(ctx, `SELECT id FROM `+table+` WHERE k = $1`, k).Scan(&n)
			},
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 4); return err },
			func(tx pgx.Tx, _ string) error { return tx.Commit(ctx) },
		},
		want: []string{"no rows", "ok", "ok"},
		rows: []int{4},
	}, {
		name: "RollbackUndoesTheFirstStatementAndEndsTheTransaction",
		steps: []step{
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 5); return err },
			func(tx pgx.Tx, _ string) error { return tx.Rollback(ctx) },
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 6); return err },
			func(tx pgx.Tx, _ string) error { return tx.Rollback(ctx) },
			func(tx pgx.Tx, _ string) error { return tx.Commit(ctx) },
		},
		want: []string{"ok", "ok", "tx closed", "tx closed", "tx closed"},
	}, {
		name: "ASavepointRolledBackUndoesOnlyWhatRanInIt",
		steps: []step{
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 7); return err },
			func(tx pgx.Tx, k string) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := sp.Exec(ctx, insert, k, 8); err != nil {
					return err
				}
				if err := sp.Rollback(ctx); err != nil {
					return err
				}
				_, err = sp.Exec(ctx, insert, k, 9)
				return err // the savepoint is closed
			},
			func(tx pgx.Tx, k string) error {
				sp, err := tx.Begin(ctx)
				if err != nil {
					return err
				}
				if _, err := sp.Exec(ctx, insert, k, 10); err != nil {
					return err
				}
				return sp.Commit(ctx)
			},
			func(tx pgx.Tx, _ string) error { return tx.Commit(ctx) },
		},
		want: []string{"ok", "tx closed", "ok", "ok"},
		rows: []int{7, 10},
	}, {
		name: "AQueryFirstRunsInTheTransaction",
		steps: []step{
			func(tx pgx.Tx, k string) error {
				rows, _ := tx.Query(ctx, `INSERT INTO `+table+` (k, id) VALUES ($1, 11), ($1, 12) RETURNING id`, k)
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
				if err == nil && len(ids) != 2 {
					err = fmt.Errorf("got ids %v", ids)
				}
				return err
			},
			func(tx pgx.Tx, _ string) error { return tx.Rollback(ctx) },
		},
		want: []string{"ok", "ok"},
	}, {
		name: "AStatementWithoutArgumentsFirstRunsInTheTransaction",
		steps: []step{
			func(tx pgx.Tx, k string) error {
				_, err := tx.Exec(ctx, `INSERT INTO `+table+` (k, id) VALUES ('`+k+`', 13); INSERT INTO `+table+` (k, id) VALUES ('`+k+`', 14)`)
				return err
			},
			func(tx pgx.Tx, k string) error { _, err := tx.Exec(ctx, insert, k, 13); return err },
			func(tx pgx.Tx, _ string) error { return tx.Commit(ctx) },
		},
		want: []string{"ok", "23505", "commit rolled back"},
	}}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			for kind, begin := range begins {
				k := kind + "/" + sc.name
				tx := begin(t)
				got := make([]string, len(sc.steps))
				for i, s := range sc.steps {
					got[i] = outcome(s(tx, k))
				}
				_ = tx.Rollback(ctx) // a no-op unless a scenario left the transaction open
				want, wantRows := sc.want, sc.rows
				if kind == "inbox" && sc.wantInbox != nil {
					want, wantRows = sc.wantInbox, sc.rowsInbox
				}
				require.Equal(t, want, got, "%s's transaction", kind)
				rows, _ := pool.Query(ctx, `SELECT id FROM `+table+` WHERE k = $1 ORDER BY id`, k)
				ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
				require.NoError(t, err)
				require.Equal(t, nilIfEmpty(wantRows), nilIfEmpty(ids), "%s's transaction committed", kind)
				// A connection the pool destroys counts as acquired until it is closed, in the background.
				require.Eventually(t, func() bool { return pool.Stat().AcquiredConns() == 0 }, 5*time.Second, 10*time.Millisecond,
					"%s's transaction gave its connection back", kind)
			}
		})
	}
}

// outcome names what a statement ended with: "ok", a PostgreSQL error's code, or pgx's error.
func outcome(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &pgErr):
		return pgErr.Code
	case errors.Is(err, pgx.ErrTxClosed):
		return "tx closed"
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return "commit rolled back"
	case errors.Is(err, pgx.ErrNoRows):
		return "no rows"
	}
	return "client error"
}

func nilIfEmpty(ids []int) []int {
	if len(ids) == 0 {
		return nil
	}
	return ids
}

func TestDeferredBeginOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testDSN())
	require.NoError(t, err)
	inboxtest.SkipWhenShort(t, "PostgreSQL")
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	for _, c := range []struct {
		opts      driver.TxOptions
		isolation string
		readOnly  string
	}{
		{driver.TxOptions{}, "serializable", "off"},
		{driver.TxOptions{ReadCommitted: true}, "read committed", "off"},
		{driver.TxOptions{ReadOnly: true}, "serializable", "on"},
		{driver.TxOptions{ReadCommitted: true, ReadOnly: true}, "read committed", "on"},
	} {
		tx, err := pgxinbox.Pool(pool).Begin(ctx, c.opts)
		require.NoError(t, err)
		var isolation, readOnly string
		require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting($1), current_setting($2)`,
			"transaction_isolation", "transaction_read_only").Scan(&isolation, &readOnly))
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, c.isolation, isolation, "%+v", c.opts)
		require.Equal(t, c.readOnly, readOnly, "%+v", c.opts)
	}
}

func TestDeferredBeginCancelledFirstStatementHoldsNothing(t *testing.T) {
	t.Parallel()
	pool := openPool(t, testDSN())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	tx, err := pgxinbox.Pool(pool).Begin(ctx, driver.TxOptions{})
	require.NoError(t, err)
	sleep := `SELECT pg_sleep($1) -- ` + inboxtest.UniqueName("cancelled")
	_, err = tx.Exec(ctx, sleep, 5)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_ = tx.Rollback(context.Background())
	require.Eventually(t, func() bool { return pool.Stat().AcquiredConns() == 0 }, 5*time.Second, 10*time.Millisecond,
		"the connection is not kept")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE query = $1`, sleep).Scan(&n))
		return n == 0
	}, 5*time.Second, 10*time.Millisecond, "no session is left in the transaction")
}

// TestHandlerTx checks that the pgx.Tx a handler gets does everything pgx's own does, all of it committed with the
// claim, or rolled back with it.
func TestHandlerTx(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	items := b.Table + "_items"
	_, err := b.pool.Exec(ctx, `CREATE TABLE `+items+` (id int PRIMARY KEY, note text)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.pool.Exec(context.Background(), `DROP TABLE `+items) })
	ib, err := pgxinbox.New(b.pool, b.Options()...)
	require.NoError(t, err)

	payload := []byte("a large object written in the handler's transaction")
	var loid uint32
	var kept pgx.Tx
	everything := func(fail bool) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			ctx := msg.Context()
			tx, ok := pgxinbox.TxFromContext(ctx)
			if !ok {
				return nil, errors.New("no pgx transaction in the handler's context")
			}
			kept = tx
			if tx.Conn() == nil {
				return nil, errors.New("no connection")
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+items+` VALUES ($1, $2)`, 1, "exec"); err != nil {
				return nil, fmt.Errorf("exec: %w", err)
			}
			var note string
			if err := tx.QueryRow(ctx, `SELECT note FROM `+items+` WHERE id = $1`, 1).Scan(&note); err != nil || note != "exec" {
				return nil, fmt.Errorf("query row: %q, %w", note, err)
			}
			batch := &pgx.Batch{}
			batch.Queue(`INSERT INTO `+items+` VALUES ($1, $2)`, 2, "batch")
			batch.Queue(`INSERT INTO `+items+` VALUES ($1, $2)`, 3, "batch")
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return nil, fmt.Errorf("batch: %w", err)
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{items}, []string{"id", "note"},
				pgx.CopyFromRows([][]any{{4, "copy"}, {5, "copy"}})); err != nil {
				return nil, fmt.Errorf("copy: %w", err)
			}
			sp, err := tx.Begin(ctx)
			if err != nil {
				return nil, fmt.Errorf("savepoint: %w", err)
			}
			if _, err := sp.Exec(ctx, `INSERT INTO `+items+` VALUES ($1, $2)`, 6, "rolled back"); err != nil {
				return nil, err
			}
			if err := sp.Rollback(ctx); err != nil {
				return nil, fmt.Errorf("rollback to savepoint: %w", err)
			}
			if _, err := tx.Prepare(ctx, "note_of", `SELECT note FROM `+items+` WHERE id = $1`); err != nil {
				return nil, fmt.Errorf("prepare: %w", err)
			}
			rows, _ := tx.Query(ctx, "note_of", 4)
			notes, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || len(notes) != 1 || notes[0] != "copy" {
				return nil, fmt.Errorf("query the prepared statement: %v, %w", notes, err)
			}
			los := tx.LargeObjects()
			if loid, err = los.Create(ctx, 0); err != nil {
				return nil, fmt.Errorf("create large object: %w", err)
			}
			lo, err := los.Open(ctx, loid, pgx.LargeObjectModeWrite)
			if err != nil {
				return nil, fmt.Errorf("open large object: %w", err)
			}
			if _, err := lo.Write(payload); err != nil {
				return nil, fmt.Errorf("write large object: %w", err)
			}
			if err := lo.Close(); err != nil {
				return nil, err
			}
			if fail {
				return nil, errors.New("fails after all of it")
			}
			return nil, nil
		}
	}
	countItems := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM `+items).Scan(&n))
		return n
	}
	largeObjectExists := func() bool {
		var ok bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_largeobject_metadata WHERE oid = $1)`, loid).Scan(&ok))
		return ok
	}

	_, err = ib.Middleware(everything(true))(newMsg("evt-1"))
	require.ErrorContains(t, err, "fails after all of it")
	require.Zero(t, countItems(), "a failed handler's writes are rolled back")
	require.False(t, largeObjectExists())
	require.Zero(t, b.Rows(t, "wallet-credits"))

	_, err = ib.Middleware(everything(false))(newMsg("evt-1"))
	require.NoError(t, err)
	require.Equal(t, 5, countItems(), "every write but the savepoint's is committed with the claim")
	require.Equal(t, 1, b.Rows(t, "wallet-credits"))
	require.True(t, largeObjectExists())
	_, err = kept.Exec(ctx, `SELECT 1`)
	require.ErrorIs(t, err, pgx.ErrTxClosed, "the inbox ended the transaction")

	// The large object's content, read back in a transaction of pgx's own.
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	los := tx.LargeObjects()
	lo, err := los.Open(ctx, loid, pgx.LargeObjectModeRead)
	require.NoError(t, err)
	got, err := io.ReadAll(lo)
	require.NoError(t, err)
	require.True(t, bytes.Equal(payload, got))
	require.NoError(t, los.Unlink(ctx, loid))
	require.NoError(t, tx.Commit(ctx))
}
