package pgxinbox

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Beginner begins pgx transactions: *pgxpool.Pool does, and so does *pgx.Conn, which serves one message at a time
// since a connection runs one statement at a time (give the inbox a pool when handlers run concurrently).
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Pool returns the inbox's view of p: every transaction the inbox begins, it begins on p.
func Pool(p Beginner) driver.Pool { return pool{p} }

// Tx returns the inbox's view of tx, a transaction someone else began and will end: the inbox only runs statements
// on it (watermill-sql v4's subscriber transaction over pgx, for one).
func Tx(tx pgx.Tx) driver.Tx { return pgxTx{tx} }

type pool struct{ b Beginner }

func (p pool) Begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var o pgx.TxOptions
	if opts.ReadCommitted {
		o.IsoLevel = pgx.ReadCommitted
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	tx, err := p.b.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return pgxTx{tx}, nil
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	if err != nil {
		return 0, txDone(err)
	}
	return tag.RowsAffected(), nil
}

func (t pgxTx) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	return row{t.tx.QueryRow(ctx, query, args...)}
}

func (t pgxTx) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	r, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return nil, txDone(err)
	}
	return rows{r}, nil
}

func (t pgxTx) Commit(ctx context.Context) error   { return txDone(t.tx.Commit(ctx)) }
func (t pgxTx) Rollback(ctx context.Context) error { return txDone(t.tx.Rollback(ctx)) }
func (t pgxTx) Native() any                        { return t.tx }

// txDone translates pgx's error for a transaction that already ended into the one the inbox branches on.
func txDone(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return driver.ErrTxDone
	}
	return err
}

type row struct{ r pgx.Row }

func (r row) Scan(dest ...any) error {
	err := r.r.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.ErrNoRows
	}
	return err
}

// rows adds the error result database/sql's Close has; pgx reports a failure to close through Err.
type rows struct{ r pgx.Rows }

func (r rows) Next() bool             { return r.r.Next() }
func (r rows) Scan(dest ...any) error { return r.r.Scan(dest...) }
func (r rows) Err() error             { return r.r.Err() }
func (r rows) Close() error           { r.r.Close(); return nil }
