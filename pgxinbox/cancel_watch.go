package pgxinbox

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// The batches a deferredTx sends (a first statement with BEGIN or a savepoint, a statement with COMMIT, the
// handler's own) reach pgx on a context that cannot be cancelled, and the transaction watches the real one itself
// until the batch is closed.
//
// Why: pgx before v5.9.0 watches a query's context with a goroutine that ends only when the query unwatches it, and
// its pipeline, which sends a batch in every query exec mode but exec and simple_protocol, does not unwatch when the
// connection fails while it reads the answers (the context was cancelled and pgx set a deadline on the connection to
// cut the read short; the backend was terminated). The goroutine then waits for the context, then for an unwatch
// that never comes, for the life of the process, holding the context. A watch of the transaction's own, through
// context.AfterFunc, ends when the batch does, whatever became of its connection, as pgx's does from v5.9.0.

// cancelHandlerKey keys, in a connection's CustomData, what the connection does when a statement's context is
// cancelled.
const cancelHandlerKey = "pgxinbox.cancel_handler"

// cancelHandler returns what pgx does on conn when a statement's context is cancelled (by default, it sets a
// deadline on the connection, which cuts a read short), made once per connection by the connection's own
// BuildContextWatcherHandler.
func cancelHandler(conn *pgx.Conn) ctxwatch.Handler {
	pg := conn.PgConn()
	data := pg.CustomData()
	if h, ok := data[cancelHandlerKey].(ctxwatch.Handler); ok {
		return h
	}
	h := conn.Config().BuildContextWatcherHandler(pg)
	if data != nil { // nil only on a connection pgconn.Construct made without it
		data[cancelHandlerKey] = h
	}
	return h
}

// sendBatch sends b as conn.SendBatch does, watching ctx itself when ctx can be cancelled (see above): closing the
// results ends the watch.
func (t *deferredTx) sendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if ctx.Done() == nil || ctx.Err() != nil {
		return t.conn.SendBatch(ctx, b) // nothing to watch; or pgx refuses the batch before it watches anything
	}
	w := &t.watched
	if w.stop != nil {
		w = new(watchedBatch) // the last one was never closed
	}
	w.watch(ctx, cancelHandler(t.conn))
	w.BatchResults = t.conn.SendBatch(context.WithoutCancel(ctx), b)
	return w
}

// watchedBatch is the results of a batch that pgx runs on a context it cannot cancel, while the transaction watches
// the real one. Its errors are those pgx would have returned on the real context: a read that a cancellation cut
// short fails with context.Canceled, or with an error that wraps context.DeadlineExceeded.
type watchedBatch struct {
	pgx.BatchResults
	ctx       context.Context
	handler   ctxwatch.Handler
	stop      func() bool   // ends the watch; nil once it ended
	cancelled chan struct{} // closed once handler has handled ctx's cancellation
}

func (w *watchedBatch) watch(ctx context.Context, h ctxwatch.Handler) {
	cancelled := make(chan struct{})
	*w = watchedBatch{ctx: ctx, handler: h, cancelled: cancelled}
	w.stop = context.AfterFunc(ctx, func() {
		h.HandleCancel(ctx)
		close(cancelled)
	})
}

// unwatch ends the watch. After a cancellation, it waits for the handler and lets it undo what it did to the
// connection (its deadline), as pgx does when a statement whose context was cancelled ends.
func (w *watchedBatch) unwatch() {
	if w.stop == nil {
		return
	}
	if !w.stop() {
		<-w.cancelled
		w.handler.HandleUnwatchAfterCancel()
	}
	w.stop = nil
}

// asOn returns err, an error of a statement that pgx ran on a context it could not cancel, as pgx would have
// returned it on ctx: pgx reports a read that a cancellation's deadline cut short as ctx's end.
func asOn(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err // the common path: the target below escapes, so it is declared only when it is needed
	}
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		return err
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return context.Canceled
	}
	return fmt.Errorf("%w: %w", ctx.Err(), err)
}

func (w *watchedBatch) Exec() (pgconn.CommandTag, error) {
	tag, err := w.BatchResults.Exec()
	return tag, asOn(w.ctx, err)
}

func (w *watchedBatch) Query() (pgx.Rows, error) {
	rows, err := w.BatchResults.Query()
	return watchedRows{rows, w.ctx}, asOn(w.ctx, err)
}

func (w *watchedBatch) QueryRow() pgx.Row { return watchedRow{w.BatchResults.QueryRow(), w.ctx} }

func (w *watchedBatch) Close() error {
	err := w.BatchResults.Close()
	w.unwatch()
	return asOn(w.ctx, err)
}

type watchedRows struct {
	pgx.Rows
	ctx context.Context
}

func (r watchedRows) Err() error { return asOn(r.ctx, r.Rows.Err()) }

type watchedRow struct {
	row pgx.Row
	ctx context.Context
}

func (r watchedRow) Scan(dest ...any) error { return asOn(r.ctx, r.row.Scan(dest...)) }
