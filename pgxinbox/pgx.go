package pgxinbox

import (
	"context"
	"errors"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Beginner begins pgx transactions: *pgxpool.Pool does, and so does *pgx.Conn, which serves one message at a time
// since a connection runs one statement at a time (give the inbox a pool when handlers run concurrently).
//
// On a *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn the inbox does not call BeginTx: it takes a connection and
// sends BEGIN together with the transaction's first statement, the claim, saving a round trip per message (see
// deferredTx). The handler's pgx.Tx behaves as pgx's own; a pgx tracer sees BEGIN and the claim as one batch, and
// in batch mode the members' first statements, each after its savepoint, as batches of several. Any other
// Beginner's transactions begin as it begins them. PlainBegin switches the saving off.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// The contracts of the inbox that pgxinbox's pool keeps: a method renamed here fails the build instead of switching
// pipelining or the claim at commit off.
var (
	_ driver.PoolLimit   = pool{}
	_ driver.TxCapser    = pool{}
	_ driver.Identifier  = pool{}
	_ driver.NativeTyper = pool{}
)

// Pool returns the inbox's view of p: every transaction the inbox begins, it begins on p. Over a nil p (a nil
// *pgxpool.Pool, say) the view reaches no database: it says so (driver.Identifier), and the inbox refuses it when
// it is built.
func Pool(p Beginner) driver.Pool {
	if isNil(p) {
		return pool{}
	}
	return pool{p, maxConnsOf(p)}
}

// maxConnsOf is the limit of connections of a *pgxpool.Pool, itself or behind PlainBegin; 0 (unknown) for anything
// else. It is fixed when the pool is made, and Config copies it: read it once.
func maxConnsOf(p Beginner) int {
	switch p := p.(type) {
	case *pgxpool.Pool:
		return int(p.Config().MaxConns)
	case plainBeginner:
		return maxConnsOf(p.b)
	}
	return 0
}

// isNil reports whether p is nil, or a nil pointer (or map, or func) in a Beginner, which has nothing to begin on.
func isNil(p Beginner) bool {
	if p == nil {
		return true
	}
	v := reflect.ValueOf(p)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Interface, reflect.Chan, reflect.Slice:
		return v.IsNil()
	}
	return false
}

// errNilPool is what a view of a nil Beginner answers, instead of panicking in every transaction.
var errNilPool = errors.New("pgxinbox: the pool is nil")

// Identify reports a nil Beginner, and otherwise PostgreSQL: pgx speaks no other protocol (driver.Identifier).
func (p pool) Identify() (driver.Server, error) {
	if p.b == nil {
		return "", errNilPool
	}
	return driver.PostgreSQL, nil
}

// Tx returns the inbox's view of tx, a transaction someone else began and will end: the inbox only runs statements
// on it (watermill-sql v4's subscriber transaction over pgx, for one).
func Tx(tx pgx.Tx) driver.Tx { return pgxTx{tx} }

type pool struct {
	b        Beginner
	maxConns int
}

// MaxConns is the pool's limit of connections, for a *pgxpool.Pool (see maxConnsOf); 0 (unknown) for anything else.
func (p pool) MaxConns() int { return p.maxConns }

// TxCaps tells what the transactions the inbox begins on p can do beyond driver.Tx (driver.TxCapser): on a
// *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn, which begin them as deferredTxs, they send a statement with their
// COMMIT, hold a statement back for the next one, and pipeline batch members' first statements. Behind PlainBegin,
// and on any other Beginner, they only give batch members their views.
func (p pool) TxCaps() driver.TxCaps {
	switch p.b.(type) {
	case acquirer, *pgxpool.Conn, *pgx.Conn:
		return deferredCaps
	}
	return viewCaps
}

// deferredCaps are the TxCaps of the transactions that Begin begins as deferredTxs: each function takes one.
var deferredCaps = driver.TxCaps{
	// CommitWith runs query and commits, in one round trip (see deferredTx.commitWith).
	CommitWith: func(ctx context.Context, tx driver.Tx, query string, args ...any) (bool, error) {
		ran, err := deferredOf(tx).commitWith(ctx, query, args)
		return ran, txDone(err)
	},
	// DeferExec holds query back until the transaction's next statement, to go in one round trip with it: the
	// inbox sets a batch member's savepoint so (see deferredTx.deferExec).
	DeferExec:   func(tx driver.Tx, query string) { deferredOf(tx).deferExec(query) },
	EndDeferred: func(tx driver.Tx) (bool, error) { return deferredOf(tx).endDeferred() },
	// ExecPipelined runs several batch members' first statements in one round trip, each after a savepoint of
	// its own (see deferredTx.execPipelined).
	ExecPipelined: func(ctx context.Context, tx driver.Tx, seats []int, sqls []string, args [][]any, results []any, errs []error) (int, error) {
		return deferredOf(tx).execPipelined(ctx, seats, sqls, args, results, errs)
	},
	RollbackToSeat: func(ctx context.Context, tx driver.Tx, seat int) error {
		return deferredOf(tx).rollbackToSeat(ctx, seat)
	},
	MemberView: memberViewOf,
}

// viewCaps are the TxCaps of the transactions that save no round trip (PlainBegin's, and any other Beginner's):
// a batch member's handler still gets its view, which refuses to end the batch and closes when the handler
// returns.
var viewCaps = driver.TxCaps{MemberView: memberViewOf}

// memberViewOf returns the pgx.Tx of a batch member's handler, a view of tx (a transaction that Begin began)
// whose statements go through first and take.
func memberViewOf(tx driver.Tx, member driver.Member) driver.View {
	var native pgx.Tx
	switch t := tx.(type) {
	case *deferredView:
		native = t.tx()
	case pgxTx:
		native = t.tx
	}
	return &memberView{tx: native, member: member}
}

// deferredOf returns the deferredTx of tx, a transaction that Begin began as one.
func deferredOf(tx driver.Tx) *deferredTx { return tx.(*deferredView).tx() }

// acquirer is what a pool of connections offers: *pgxpool.Pool.
type acquirer interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
}

func (pool) NativeType() string { return "pgx.Tx" }

func (pool) IsNative(native any) bool {
	_, ok := native.(pgx.Tx)
	return ok
}

func (p pool) Begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	switch b := p.b.(type) {
	case nil:
		return nil, errNilPool
	case acquirer:
		c, err := b.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return (*deferredView)(newDeferredTx(c.Conn(), c, beginSQL(opts.ReadCommitted, opts.ReadOnly))), nil
	case *pgxpool.Conn:
		return (*deferredView)(newDeferredTx(b.Conn(), nil, beginSQL(opts.ReadCommitted, opts.ReadOnly))), nil
	case *pgx.Conn:
		return (*deferredView)(newDeferredTx(b, nil, beginSQL(opts.ReadCommitted, opts.ReadOnly))), nil
	}
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

// deferredView is the inbox's view of a deferredTx. It is the same memory under another method set, so the inbox
// gets its driver.Tx, and the claim its row, without an allocation of their own.
type deferredView deferredTx

func (t *deferredView) tx() *deferredTx { return (*deferredTx)(t) }

func (t *deferredView) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx().Exec(ctx, query, args...)
	if err != nil {
		return 0, txDone(err)
	}
	return tag.RowsAffected(), nil
}

func (t *deferredView) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	r := t.tx().QueryRow(ctx, query, args...)
	if first, ok := r.(*firstRow); ok {
		return (*firstRowView)(first)
	}
	return row{r}
}

func (t *deferredView) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	r, err := t.tx().Query(ctx, query, args...)
	if err != nil {
		return nil, txDone(err)
	}
	return rows{r}, nil
}

func (t *deferredView) Commit(ctx context.Context) error   { return txDone(t.tx().Commit(ctx)) }
func (t *deferredView) Rollback(ctx context.Context) error { return txDone(t.tx().Rollback(ctx)) }
func (t *deferredView) Native() any                        { return t.tx() }

// firstRowView is the inbox's view of the row of a transaction's first statement.
type firstRowView firstRow

func (r *firstRowView) Scan(dest ...any) error { return noRows((*firstRow)(r).Scan(dest...)) }

// txDone translates pgx's error for a transaction that already ended into the one the inbox branches on.
func txDone(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return driver.ErrTxDone
	}
	return err
}

type row struct{ r pgx.Row }

func (r row) Scan(dest ...any) error { return noRows(r.r.Scan(dest...)) }

// noRows translates pgx's error for a query that returned no row into the one the inbox branches on.
func noRows(err error) error {
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
