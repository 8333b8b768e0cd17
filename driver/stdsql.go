package driver

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
)

// StdSQL returns a Pool over db, for any database/sql driver. Over a nil db the Pool reaches no database: it says
// so (Identifier), and the inbox refuses it when it is built.
func StdSQL(db *sql.DB) Pool { return stdPool{db: db} }

// errNilDB is what a Pool over a nil *sql.DB answers, instead of panicking in every transaction.
var errNilDB = errors.New("driver: the *sql.DB is nil")

// StdSQLTx returns a Tx over tx, a transaction someone else began and will end: the inbox only runs statements on
// it (watermill-sql's subscriber transaction, for one).
func StdSQLTx(tx *sql.Tx) Tx { return stdTx{tx: tx} }

type stdPool struct{ db *sql.DB }

var _ NativeTyper = stdPool{}

// stdServers are the database/sql drivers whose server the pool knows from their type (Identify), by package
// path and type name so that this package need not import them. Wrappers of theirs are not recognized.
var stdServers = map[[2]string]Server{
	{"github.com/lib/pq", "Driver"}:                   PostgreSQL,
	{"github.com/jackc/pgx/v5/stdlib", "Driver"}:      PostgreSQL,
	{"github.com/jackc/pgx/v4/stdlib", "Driver"}:      PostgreSQL,
	{"github.com/go-sql-driver/mysql", "MySQLDriver"}: MySQL,
}

// Identify reports a nil db, and the server of the drivers stdServers knows (Identifier).
func (p stdPool) Identify() (Server, error) {
	if p.db == nil {
		return "", errNilDB
	}
	t := reflect.TypeOf(p.db.Driver())
	if t == nil || t.Kind() != reflect.Pointer {
		return "", nil
	}
	return stdServers[[2]string{t.Elem().PkgPath(), t.Elem().Name()}], nil
}

// MaxConns is db's limit of open connections, 0 for none (SetMaxOpenConns).
func (p stdPool) MaxConns() int {
	if p.db == nil {
		return 0
	}
	return p.db.Stats().MaxOpenConnections
}

func (stdPool) NativeType() string { return "*sql.Tx" }

func (stdPool) IsNative(native any) bool {
	_, ok := native.(*sql.Tx)
	return ok
}

func (p stdPool) Begin(ctx context.Context, opts TxOptions) (Tx, error) {
	if p.db == nil {
		return nil, errNilDB
	}
	o := &sql.TxOptions{ReadOnly: opts.ReadOnly}
	if opts.ReadCommitted {
		o.Isolation = sql.LevelReadCommitted
	}
	tx, err := p.db.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return stdTx{tx: tx}, nil
}

type stdTx struct{ tx *sql.Tx }

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
