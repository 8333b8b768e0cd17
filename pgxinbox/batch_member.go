package pgxinbox

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/effectively-once/watermill-inbox/driver"
)

// memberView is the pgx.Tx of a batch member's handler: a statement with arguments goes through its member's First,
// which pipelines it if it is the member's first; any other use calls Take first, which gives the member the connection
// to itself (see the inbox's internal/batch/pipeline.go). Its Commit and Rollback refuse (driver.ErrTxShared): the
// batch's transaction is the inbox's to end. It records the first error of its statements and of the statements
// of the savepoints its handler begins (Failed), for the batch to find a handler that returned nil after a
// statement failed and left the transaction aborted. Once its handler returned (Close) it refuses every statement
// (driver.ErrHandlerReturned), and the results the handler left open are closed.
type memberView struct {
	tx     pgx.Tx // the batch's transaction: a deferredTx, or a Beginner's of its own
	member driver.Member

	use    sync.RWMutex // statements hold it shared while they run; Close takes it
	mu     sync.Mutex
	failed error
	closed bool
	open   []result // results not closed yet
}

var (
	_ pgx.Tx      = (*memberView)(nil)
	_ driver.View = (*memberView)(nil)
)

func (v *memberView) Native() any { return v }

// Close waits for a statement the view runs, then refuses every later one and closes the open results.
func (v *memberView) Close() {
	v.use.Lock()
	defer v.use.Unlock()
	v.mu.Lock()
	v.closed = true
	open := v.open
	v.open = nil
	v.mu.Unlock()
	for _, r := range open {
		r.end()
	}
}

// result is a set of rows or of batch results a view's handler opened, which the view closes with itself.
type result interface{ end() }

// enter starts a statement of the view: it returns driver.ErrHandlerReturned once the view is closed, and
// otherwise holds the view open until leave.
func (v *memberView) enter() error {
	v.use.RLock()
	v.mu.Lock()
	closed := v.closed
	v.mu.Unlock()
	if closed {
		v.use.RUnlock()
		return driver.ErrHandlerReturned
	}
	return nil
}

func (v *memberView) leave() { v.use.RUnlock() }

// opened records r as open until it is closed.
func (v *memberView) opened(r result) {
	v.mu.Lock()
	v.open = append(v.open, r)
	v.mu.Unlock()
}

func (v *memberView) closedResult(r result) {
	v.mu.Lock()
	v.open = slices.DeleteFunc(v.open, func(o result) bool { return o == r })
	v.mu.Unlock()
}

func (v *memberView) Failed() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.failed
}

// fail records err, a statement's, unless it is pgx's report of no row, which the server did not send.
func (v *memberView) fail(err error) error {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && !errors.Is(err, driver.ErrHandlerReturned) {
		v.mu.Lock()
		if v.failed == nil {
			v.failed = err
		}
		v.mu.Unlock()
	}
	return err
}

func (v *memberView) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := v.enter(); err != nil {
		return pgconn.CommandTag{}, err
	}
	defer v.leave()
	if carriesBegin(args) {
		if res, ran, err := v.member.First(ctx, sql, args); ran {
			tag, _ := res.(pgconn.CommandTag)
			return tag, v.fail(err)
		}
	}
	v.member.Take()
	tag, err := v.tx.Exec(ctx, sql, args...)
	return tag, v.fail(err)
}

func (v *memberView) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := v.enter(); err != nil {
		return errRows{nil, err}, err
	}
	defer v.leave()
	v.member.Take()
	return v.query(v.tx, ctx, sql, args)
}

// query runs a query on tx, the view's transaction or a savepoint of it, and keeps its rows as the view's.
func (v *memberView) query(tx pgx.Tx, ctx context.Context, sql string, args []any) (pgx.Rows, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, v.fail(err)
	}
	r := &viewRows{Rows: rows, v: v}
	v.opened(r)
	return r, nil
}

func (v *memberView) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := v.enter(); err != nil {
		return errRow{err}
	}
	defer v.leave()
	v.member.Take()
	return v.queryRow(v.tx, ctx, sql, args)
}

// queryRow is QueryRow as pgx's own: a query whose rows Scan reads and closes. Its rows are the view's until then,
// so that a row the handler never scans is closed when the view is.
func (v *memberView) queryRow(tx pgx.Tx, ctx context.Context, sql string, args []any) pgx.Row {
	rows, err := v.query(tx, ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return viewRow{rows}
}

func (v *memberView) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := v.enter(); err != nil {
		return nil, err
	}
	defer v.leave()
	v.member.Take()
	tx, err := v.tx.Begin(ctx)
	if err != nil {
		return nil, v.fail(err)
	}
	return &nestedView{tx: tx, v: v}, nil
}

func (v *memberView) Commit(context.Context) error   { return driver.ErrTxShared }
func (v *memberView) Rollback(context.Context) error { return driver.ErrTxShared }

func (v *memberView) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := v.enter(); err != nil {
		return errBatch{nil, err}
	}
	defer v.leave()
	v.member.Take()
	return v.sendBatch(v.tx, ctx, b)
}

func (v *memberView) sendBatch(tx pgx.Tx, ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	r := &viewBatch{BatchResults: tx.SendBatch(ctx, b), v: v}
	v.opened(r)
	return r
}

func (v *memberView) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := v.enter(); err != nil {
		return 0, err
	}
	defer v.leave()
	v.member.Take()
	n, err := v.tx.CopyFrom(ctx, table, columns, src)
	return n, v.fail(err)
}

func (v *memberView) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := v.enter(); err != nil {
		return nil, err
	}
	defer v.leave()
	v.member.Take()
	d, err := v.tx.Prepare(ctx, name, sql)
	return d, v.fail(err)
}

// nestedView is a savepoint a member's handler began on its view: its statements' errors are the view's, so that
// a failure the handler swallowed inside it, leaving the batch's transaction aborted, is found as one on the view
// is; and it refuses every statement once the view is closed.
type nestedView struct {
	tx pgx.Tx
	v  *memberView
}

var _ pgx.Tx = (*nestedView)(nil)

func (n *nestedView) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := n.v.enter(); err != nil {
		return nil, err
	}
	defer n.v.leave()
	tx, err := n.tx.Begin(ctx)
	if err != nil {
		return nil, n.v.fail(err)
	}
	return &nestedView{tx: tx, v: n.v}, nil
}

func (n *nestedView) Commit(ctx context.Context) error {
	if err := n.v.enter(); err != nil {
		return err
	}
	defer n.v.leave()
	return n.v.fail(n.tx.Commit(ctx))
}

func (n *nestedView) Rollback(ctx context.Context) error {
	if err := n.v.enter(); err != nil {
		return err
	}
	defer n.v.leave()
	return n.v.fail(n.tx.Rollback(ctx))
}

func (n *nestedView) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := n.v.enter(); err != nil {
		return pgconn.CommandTag{}, err
	}
	defer n.v.leave()
	tag, err := n.tx.Exec(ctx, sql, args...)
	return tag, n.v.fail(err)
}

func (n *nestedView) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := n.v.enter(); err != nil {
		return errRows{nil, err}, err
	}
	defer n.v.leave()
	return n.v.query(n.tx, ctx, sql, args)
}

func (n *nestedView) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := n.v.enter(); err != nil {
		return errRow{err}
	}
	defer n.v.leave()
	return n.v.queryRow(n.tx, ctx, sql, args)
}

func (n *nestedView) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := n.v.enter(); err != nil {
		return errBatch{nil, err}
	}
	defer n.v.leave()
	return n.v.sendBatch(n.tx, ctx, b)
}

func (n *nestedView) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := n.v.enter(); err != nil {
		return 0, err
	}
	defer n.v.leave()
	c, err := n.tx.CopyFrom(ctx, table, columns, src)
	return c, n.v.fail(err)
}

func (n *nestedView) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := n.v.enter(); err != nil {
		return nil, err
	}
	defer n.v.leave()
	d, err := n.tx.Prepare(ctx, name, sql)
	return d, n.v.fail(err)
}

func (n *nestedView) LargeObjects() pgx.LargeObjects { return largeObjects(n) }
func (n *nestedView) Conn() *pgx.Conn                { return n.tx.Conn() }

// viewRows, viewRow and viewBatch record the errors of a member's reads, and are closed with its view.
type viewRows struct {
	pgx.Rows
	v    *memberView
	once sync.Once
}

func (r *viewRows) Close() {
	r.once.Do(func() {
		r.v.closedResult(r)
		r.Rows.Close()
		_ = r.v.fail(r.Rows.Err())
	})
}

func (r *viewRows) end() { r.Close() }

func (r *viewRows) Err() error { return r.v.fail(r.Rows.Err()) }

type viewRow struct{ rows pgx.Rows }

// Scan reads the row as pgx's own Row does: pgx.ErrNoRows when there is none, and the rows closed after it.
func (r viewRow) Scan(dest ...any) error {
	rows := r.rows
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

type viewBatch struct {
	pgx.BatchResults
	v    *memberView
	once sync.Once
	err  error
}

func (b *viewBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.v.fail(err)
}

func (b *viewBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if err != nil {
		return rows, b.v.fail(err)
	}
	return &viewRows{Rows: rows, v: b.v}, nil
}

func (b *viewBatch) QueryRow() pgx.Row {
	rows, err := b.Query()
	if err != nil {
		return errRow{err}
	}
	return viewRow{rows}
}

func (b *viewBatch) end() { _ = b.Close() }

func (b *viewBatch) Close() error {
	b.once.Do(func() {
		b.v.closedResult(b)
		b.err = b.v.fail(b.BatchResults.Close())
	})
	return b.err
}

// LargeObjects runs its calls through the view's Exec and QueryRow.
func (v *memberView) LargeObjects() pgx.LargeObjects { return largeObjects(v) }

func (v *memberView) Conn() *pgx.Conn {
	v.member.Take()
	return v.tx.Conn()
}
