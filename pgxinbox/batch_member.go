package pgxinbox

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Savepoints of batch members whose first statements go in one pipeline (see the inbox's
// internal/batch/pipeline.go), one name per seat in the batch, so that a rollback reaches one member's. The names
// are few and fixed: in the statement cache, each is prepared once per connection.
const memberSavepointPrefix = "inbox_member_"

var memberSavepointSQL, memberRollbackSQL = func() (set, rollback [inbox.MaxBatchSize + 1]string) {
	for seat := range set {
		set[seat] = "savepoint " + memberSavepointPrefix + strconv.Itoa(seat)
		rollback[seat] = "rollback to savepoint " + memberSavepointPrefix + strconv.Itoa(seat)
	}
	return set, rollback
}()

func memberSavepoint(seat int, names *[inbox.MaxBatchSize + 1]string, verb string) string {
	if seat >= 0 && seat < len(names) {
		return names[seat]
	}
	return verb + memberSavepointPrefix + strconv.Itoa(seat)
}

// execPipelined runs, in one batch, for each k the savepoint of seats[k] and then sqls[k] with args[k], and reads
// their answers: see inbox's pipeliner. A statement's PostgreSQL error is its own; the batch's other errors (one
// of a savepoint, a broken connection) are returned.
func (t *deferredTx) execPipelined(ctx context.Context, seats []int, sqls []string, args [][]any, results []any, errs []error) (set int, err error) {
	if err := t.ensureBegun(ctx); err != nil {
		return 0, err
	}
	t.pipe.QueuedQueries = t.pipe.QueuedQueries[:0]
	for k := range sqls {
		t.pipe.Queue(memberSavepoint(seats[k], &memberSavepointSQL, "savepoint "))
		t.pipe.Queue(sqls[k], args[k]...)
	}
	br := t.sendBatch(ctx, &t.pipe)
	for k := range sqls {
		if _, err = br.Exec(); err != nil {
			break
		}
		set++
		var tag pgconn.CommandTag
		tag, errs[k] = br.Exec()
		results[k] = tag
		if errs[k] != nil {
			if pgErr := (*pgconn.PgError)(nil); !errors.As(errs[k], &pgErr) {
				err = errs[k]
			}
			break
		}
	}
	cerr := br.Close() // after a statement's error, that error again
	if err == nil && (set == 0 || errs[set-1] == nil) && cerr != nil {
		err = cerr
	}
	clear(t.pipe.QueuedQueries)
	return set, err
}

// rollbackToSeat rolls back to the newest savepoint of seat.
func (t *deferredTx) rollbackToSeat(ctx context.Context, seat int) error {
	_, err := t.conn.Exec(ctx, memberSavepoint(seat, &memberRollbackSQL, "rollback to savepoint "))
	return err
}

// memberView is the pgx.Tx of a batch member's handler: a statement with arguments goes through first, which
// pipelines it if it is the member's first; any other use calls take first, which gives the member the connection
// to itself (see the inbox's internal/batch/pipeline.go). Its Commit and Rollback refuse (driver.ErrTxShared): the
// batch's transaction is the inbox's to end. It records the first error of its statements (Failed), for the batch
// to find a handler that returned nil after a statement failed and left the transaction aborted.
type memberView struct {
	tx    *deferredTx
	first func(ctx context.Context, sql string, args []any) (res any, ran bool, err error)
	take  func()

	mu     sync.Mutex
	failed error
}

var (
	_ pgx.Tx      = (*memberView)(nil)
	_ driver.View = (*memberView)(nil)
)

func (v *memberView) Native() any { return v }
func (v *memberView) Close()      {}

func (v *memberView) Failed() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.failed
}

// fail records err, a statement's, unless it is pgx's report of no row, which the server did not send.
func (v *memberView) fail(err error) error {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		v.mu.Lock()
		if v.failed == nil {
			v.failed = err
		}
		v.mu.Unlock()
	}
	return err
}

func (v *memberView) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if carriesBegin(args) {
		if res, ran, err := v.first(ctx, sql, args); ran {
			tag, _ := res.(pgconn.CommandTag)
			return tag, v.fail(err)
		}
	}
	v.take()
	tag, err := v.tx.Exec(ctx, sql, args...)
	return tag, v.fail(err)
}

func (v *memberView) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	v.take()
	rows, err := v.tx.Query(ctx, sql, args...)
	if err != nil {
		return rows, v.fail(err)
	}
	return viewRows{rows, v}, nil
}

func (v *memberView) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	v.take()
	return viewRow{v.tx.QueryRow(ctx, sql, args...), v}
}

func (v *memberView) Begin(ctx context.Context) (pgx.Tx, error) {
	v.take()
	tx, err := v.tx.Begin(ctx)
	return tx, v.fail(err)
}

func (v *memberView) Commit(context.Context) error   { return driver.ErrTxShared }
func (v *memberView) Rollback(context.Context) error { return driver.ErrTxShared }

func (v *memberView) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	v.take()
	return viewBatch{v.tx.SendBatch(ctx, b), v}
}

func (v *memberView) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	v.take()
	n, err := v.tx.CopyFrom(ctx, table, columns, src)
	return n, v.fail(err)
}

func (v *memberView) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	v.take()
	d, err := v.tx.Prepare(ctx, name, sql)
	return d, v.fail(err)
}

// viewRows, viewRow and viewBatch record the errors of a member's reads.
type viewRows struct {
	pgx.Rows
	v *memberView
}

func (r viewRows) Close()     { r.Rows.Close(); _ = r.v.fail(r.Rows.Err()) }
func (r viewRows) Err() error { return r.v.fail(r.Rows.Err()) }

type viewRow struct {
	pgx.Row
	v *memberView
}

func (r viewRow) Scan(dest ...any) error { return r.v.fail(r.Row.Scan(dest...)) }

type viewBatch struct {
	pgx.BatchResults
	v *memberView
}

func (b viewBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := b.BatchResults.Exec()
	return tag, b.v.fail(err)
}

func (b viewBatch) Query() (pgx.Rows, error) {
	rows, err := b.BatchResults.Query()
	if err != nil {
		return rows, b.v.fail(err)
	}
	return viewRows{rows, b.v}, nil
}

func (b viewBatch) QueryRow() pgx.Row { return viewRow{b.BatchResults.QueryRow(), b.v} }
func (b viewBatch) Close() error      { return b.v.fail(b.BatchResults.Close()) }

// LargeObjects runs its calls through the view's Exec and QueryRow.
func (v *memberView) LargeObjects() pgx.LargeObjects { return largeObjects(v) }

func (v *memberView) Conn() *pgx.Conn {
	v.take()
	return v.tx.conn
}
