package driver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// viewOfShared returns a view of s, a transaction BeginShared began, as the inbox asks for one: through the pool's
// TxCaps.
func viewOfShared(ctx context.Context, s Tx) (View, error) {
	return StdSQL(nil).(TxCapser).TxCaps().View(ctx, s)
}

// beginSharedWithRow creates a table of the test's own, begins a shared transaction on db with opts whose owner
// inserts the row 1, and returns the table, the transaction and a view of it.
func beginSharedWithRow(t *testing.T, db *sql.DB, opts TxOptions) (string, Tx, View) {
	t.Helper()
	ctx := context.Background()
	table := fmt.Sprintf("driver_shared_%d", time.Now().UnixNano())
	if _, err := db.Exec(`CREATE TABLE ` + table + ` (n int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE ` + table) })
	s, err := StdSQL(db).(SharedPool).BeginShared(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, `INSERT INTO `+table+` VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	v, err := viewOfShared(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return table, s, v
}

func TestStdSQL_ASharedTransactionsViewsRunInItAndCannotEndIt(t *testing.T) {
	ctx := context.Background()
	db := openLibpq(t)
	db.SetMaxOpenConns(1) // the shared transaction holds the pool's one connection until it ends
	table, s, v := beginSharedWithRow(t, db, TxOptions{})
	handler := v.Native().(*sql.Tx)
	if _, err := handler.ExecContext(ctx, `INSERT INTO `+table+` VALUES (2)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := handler.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the view sees the owner's row and its own: %d, %v", n, err)
	}
	if err := handler.Commit(); !errors.Is(err, ErrTxShared) {
		t.Fatalf("a view's Commit returns ErrTxShared, not %v", err)
	}
	if v.Failed() != nil {
		t.Fatalf("no statement of the view failed: %v", v.Failed())
	}

	second, err := viewOfShared(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	other := second.Native().(*sql.Tx)
	if _, err := other.ExecContext(ctx, `INSERT INTO `+table+` VALUES (1)`); err == nil {
		t.Fatal("a duplicate key fails")
	}
	if second.Failed() == nil {
		t.Fatal("the view records its statement's failure")
	}
	if err := other.Rollback(); !errors.Is(err, ErrTxShared) {
		t.Fatalf("a view's Rollback returns ErrTxShared, not %v", err)
	}
	if err := s.Rollback(ctx); err != nil { // the failed statement aborted the transaction: the owner ends it
		t.Fatal(err)
	}

	// The connection is back in the pool, and nothing of the rolled-back transaction stayed.
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the rollback leaves no row: %d, %v", n, err)
	}

	s, err = StdSQL(db).(SharedPool).BeginShared(ctx, TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err = viewOfShared(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Native().(*sql.Tx).ExecContext(ctx, `INSERT INTO `+table+` VALUES (3)`); err != nil {
		t.Fatal(err)
	}
	rows, err := v.Native().(*sql.Tx).QueryContext(ctx, `SELECT n FROM `+table) // left open by its handler
	if err != nil {
		t.Fatal(err)
	}
	v.Close()
	if _, err := v.Native().(*sql.Tx).ExecContext(ctx, `INSERT INTO `+table+` VALUES (4)`); !errors.Is(err, ErrHandlerReturned) {
		t.Fatalf("a closed view runs nothing, and says why: %v", err)
	}
	if err := v.Native().(*sql.Tx).QueryRowContext(ctx, `SELECT 1`).Scan(&n); !errors.Is(err, ErrHandlerReturned) {
		t.Fatalf("no query either: %v", err)
	}
	if _, err := s.Exec(ctx, `INSERT INTO `+table+` VALUES (5)`); err != nil { // the open result no longer stands in the way
		t.Fatalf("the owner's statement after a view closed with a result open: %v", err)
	}
	if rows.Next() {
		t.Fatal("the result closed with its view reads nothing more")
	}
	_ = rows.Close()
	if err := s.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the owner's commit keeps the view's row and its own: %d, %v", n, err)
	}
}

// TestStdSQL_OnceAStatementEndedTheServersTransactionEveryLaterOneAndTheCommitAreRefused stands a PostgreSQL error
// in for MySQL's deadlock (TxOptions.Ends): after it, the view's statements, the owner's and the commit fail with
// ErrTxEnded wrapping that error, and nothing the transaction ran commits.
func TestStdSQL_OnceAStatementEndedTheServersTransactionEveryLaterOneAndTheCommitAreRefused(t *testing.T) {
	ctx := context.Background()
	db := openLibpq(t)
	ends := func(err error) bool { return err != nil && strings.Contains(err.Error(), "division by zero") }
	table, s, v := beginSharedWithRow(t, db, TxOptions{Ends: ends})
	handler := v.Native().(*sql.Tx)
	_, cause := handler.ExecContext(ctx, `SELECT 1/0`)
	if !ends(cause) {
		t.Fatalf("the statement that ends the transaction: %v", cause)
	}
	if _, err := handler.ExecContext(ctx, `INSERT INTO `+table+` VALUES (2)`); !errors.Is(err, ErrTxEnded) || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("the view's next statement: %v", err)
	}
	if _, err := s.Exec(ctx, `INSERT INTO `+table+` VALUES (3)`); !errors.Is(err, ErrTxEnded) {
		t.Fatalf("the owner's next statement: %v", err)
	}
	if err := s.Commit(ctx); !errors.Is(err, ErrTxEnded) {
		t.Fatalf("the commit: %v", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("nothing commits: %d, %v", n, err)
	}
}

// BenchmarkStdSQL_BeginShared compares, over lib/pq, a transaction of one statement begun as batch mode begins its
// own (a shared transaction, with one handler's view) with a plain one: what the views cost a batch. Read the two
// as a ratio within one run.
func BenchmarkStdSQL_BeginShared(b *testing.B) {
	ctx := context.Background()
	db := openLibpq(b)
	p := StdSQL(db)
	b.Run("kind=plain", func(b *testing.B) {
		for b.Loop() {
			tx, err := p.Begin(ctx, TxOptions{})
			if err == nil {
				_, err = tx.Exec(ctx, `SELECT 1`)
			}
			if err == nil {
				err = tx.Commit(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kind=shared", func(b *testing.B) {
		for b.Loop() {
			tx, err := p.(SharedPool).BeginShared(ctx, TxOptions{})
			var v View
			if err == nil {
				v, err = viewOfShared(ctx, tx)
			}
			if err == nil {
				_, err = v.Native().(*sql.Tx).ExecContext(ctx, `SELECT 1`)
			}
			if err == nil {
				err = tx.Commit(ctx)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestStdSQL_OnlyASharedTransactionHasViews: the pool's TxCaps give a view of what BeginShared began, and refuse a
// plain transaction of the pool's with an error instead of a view that would not refuse its Commit.
func TestStdSQL_OnlyASharedTransactionHasViews(t *testing.T) {
	ctx := context.Background()
	tx, err := StdSQL(openLibpq(t)).Begin(ctx, TxOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if v, err := viewOfShared(ctx, tx); v != nil || !errors.Is(err, errNotShared) {
		t.Fatalf("a plain transaction's view: %v, %v", v, err)
	}
}
