package driver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"reflect"
)

// StdSQL returns a Pool over db, for any database/sql driver.
func StdSQL(db *sql.DB) Pool { return stdPool{db: db, literal: db != nil && isLibpq(db.Driver())} }

// StdSQLTx returns a Tx over tx, a transaction someone else began and will end: the inbox only runs statements on
// it (watermill-sql's subscriber transaction, for one).
func StdSQLTx(tx *sql.Tx) Tx { return stdTx{tx: tx} }

type stdPool struct {
	db      *sql.DB
	literal bool // its transactions' LiteralArgs
}

// isLibpq reports whether d is lib/pq's driver, found by its type so that this package need not import it.
// A driver that wraps lib/pq's (for tracing, say) is not recognized, and its statements keep their arguments.
func isLibpq(d sqldriver.Driver) bool {
	t := reflect.TypeOf(d)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "github.com/lib/pq" && t.Elem().Name() == "Driver"
}

// MaxConns is db's limit of open connections, 0 for none (SetMaxOpenConns).
func (p stdPool) MaxConns() int { return p.db.Stats().MaxOpenConnections }

func (p stdPool) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	o := &sql.TxOptions{ReadOnly: opts.ReadOnly}
	if opts.ReadCommitted {
		o.Isolation = sql.LevelReadCommitted
	}
	tx, err := p.db.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return stdTx{tx: tx, literal: p.literal}, nil
}

type stdTx struct {
	tx      *sql.Tx
	literal bool
}

// LiteralArgs is true over lib/pq (see LiteralArgs).
func (t stdTx) LiteralArgs() bool { return t.literal }

func (t stdTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t stdTx) QueryRow(ctx context.Context, query string, args ...any) Row {
	return stdRow{t.tx.QueryRowContext(ctx, query, args...)}
}

func (t stdTx) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// Commit and Rollback take no context: database/sql ties the transaction to the context it began with.
func (t stdTx) Commit(context.Context) error   { return txDone(t.tx.Commit()) }
func (t stdTx) Rollback(context.Context) error { return txDone(t.tx.Rollback()) }
func (t stdTx) Native() any                    { return t.tx }

func txDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return ErrTxDone
	}
	return err
}

type stdRow struct{ row *sql.Row }

func (r stdRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNoRows
	}
	return err
}
