package pgxinbox

import (
	"context"
	"reflect"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// savepoint is a pseudo nested transaction of a deferredTx, as pgx's own transaction makes them.
type savepoint struct {
	tx     *deferredTx
	name   string // the savepoint's number
	closed bool
}

func (sp *savepoint) Begin(ctx context.Context) (pgx.Tx, error) {
	if sp.closed {
		return nil, pgx.ErrTxClosed
	}
	return sp.tx.Begin(ctx)
}

// Commit releases the savepoint.
func (sp *savepoint) Commit(ctx context.Context) error {
	if sp.closed {
		return pgx.ErrTxClosed
	}
	_, err := sp.Exec(ctx, releaseSavepointPrefix+sp.name)
	sp.closed = true
	return err
}

// Rollback rolls back to the savepoint.
func (sp *savepoint) Rollback(ctx context.Context) error {
	if sp.closed {
		return pgx.ErrTxClosed
	}
	_, err := sp.Exec(ctx, rollbackSavepointPrefix+sp.name)
	sp.closed = true
	return err
}

func (sp *savepoint) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if sp.closed {
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	}
	return sp.tx.Exec(ctx, sql, args...)
}

func (sp *savepoint) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if sp.closed {
		return errRow{pgx.ErrTxClosed}
	}
	return sp.tx.QueryRow(ctx, sql, args...)
}

func (sp *savepoint) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if sp.closed {
		return errRows{sp.tx.conn, pgx.ErrTxClosed}, pgx.ErrTxClosed
	}
	return sp.tx.Query(ctx, sql, args...)
}

func (sp *savepoint) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if sp.closed {
		return errBatch{sp.tx.conn, pgx.ErrTxClosed}
	}
	return sp.tx.SendBatch(ctx, b)
}

func (sp *savepoint) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if sp.closed {
		return 0, pgx.ErrTxClosed
	}
	return sp.tx.CopyFrom(ctx, table, columns, src)
}

func (sp *savepoint) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if sp.closed {
		return nil, pgx.ErrTxClosed
	}
	return sp.tx.Prepare(ctx, name, sql)
}

func (sp *savepoint) LargeObjects() pgx.LargeObjects { return largeObjects(sp) }
func (sp *savepoint) Conn() *pgx.Conn                { return sp.tx.Conn() }

// errBatch is the results of a batch that could not be sent.
type errBatch struct {
	conn *pgx.Conn
	err  error
}

func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return errRows(b), b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow{b.err} }
func (b errBatch) Close() error                     { return b.err }

// errRows is the rows of a query that could not be sent: none, and the reason.
type errRows struct {
	conn *pgx.Conn
	err  error
}

func (r errRows) Close()                                       {}
func (r errRows) Err() error                                   { return r.err }
func (r errRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r errRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r errRows) Next() bool                                   { return false }
func (r errRows) Scan(...any) error                            { return r.err }
func (r errRows) Values() ([]any, error)                       { return nil, r.err }
func (r errRows) RawValues() [][]byte                          { return nil }
func (r errRows) Conn() *pgx.Conn                              { return r.conn }

// largeObjects returns pgx's large objects API running its calls on tx. pgx.LargeObjects is a struct whose one
// field, the transaction, pgx leaves unexported and fills in only for its own transaction types; a transaction
// implemented outside pgx can build one only by writing that field through its known layout. The layout is checked
// once, and a pgx whose LargeObjects looks otherwise gets a panic with the reason, never a misread memory.
func largeObjects(tx pgx.Tx) pgx.LargeObjects {
	if !largeObjectsLayoutKnown {
		panic("pgxinbox: this version of pgx lays out pgx.LargeObjects differently; LargeObjects is unavailable on the inbox's transaction")
	}
	lo := largeObjectsLayout{tx: tx}
	return *(*pgx.LargeObjects)(unsafe.Pointer(&lo))
}

type largeObjectsLayout struct{ tx pgx.Tx }

var largeObjectsLayoutKnown = func() bool {
	lo, ours := reflect.TypeFor[pgx.LargeObjects](), reflect.TypeFor[largeObjectsLayout]()
	return lo.NumField() == 1 && lo.Field(0).Type == reflect.TypeFor[pgx.Tx]() && lo.Size() == ours.Size()
}()
