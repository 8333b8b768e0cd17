package pgxinbox

import (
	"context"
	"errors"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// deferredTx is a pgx transaction whose BEGIN waits for the transaction's first statement and goes to the server
// in one pipeline with it. The inbox's message costs BEGIN, the claim, the handler's statements and COMMIT; with
// pgx's own transaction BEGIN is a round trip of its own, here it rides with the claim. PostgreSQL takes a
// transaction's snapshot at its first statement, not at BEGIN, and holds no lock for a bare BEGIN, so the
// transaction sees and locks exactly what it would have.
//
// Why this shape, among what pgx v5.8.0 offers:
//   - TxOptions.BeginQuery only replaces BEGIN's text: Conn.BeginTx still runs it on its own, without arguments, so
//     the claim could join it only with its values spliced into the SQL and no prepared statement, and BeginTx
//     closes the connection when that query fails, as a claim may.
//   - pgconn's pipeline mode is the wire protocol wanted, but using it directly would mean redoing what pgx.Conn
//     does above it: the statement and description caches, argument encoding, the query exec modes.
//   - Conn.SendBatch is that pipeline with all of pgx.Conn: a batch of BEGIN and the first statement is one write
//     and one sync, prepared by the statement cache, or described by the description cache when the connection's
//     default_query_exec_mode is cache_describe (behind pgbouncer); in simple_protocol both travel in one query
//     string. So the first statement goes out as a two-query batch.
//
// pgx makes its own transaction type only in Conn.BeginTx, which sends BEGIN at once, so deferredTx implements
// pgx.Tx itself, keeping the behaviour of pgx's: savepoints named sp_1, sp_2, ... for Begin; ErrTxClosed after the
// end; ErrTxCommitRollback when COMMIT finds the transaction failed; a connection whose COMMIT or ROLLBACK failed is
// closed rather than reused. Only Exec and QueryRow carry BEGIN with them, and only with arguments (without any,
// pgx sends a statement in the simple protocol, which may hold several statements no batch could prepare); any
// other first use (Query, SendBatch, CopyFrom, Prepare, Begin, LargeObjects) sends BEGIN alone first, as pgx does.
// A tracer sees the first statement as a batch of two. One difference remains: pgx closes the connection of a batch
// one of whose arguments it cannot encode once it queued part of it, here BEGIN, where its own transaction would
// stay usable; the inbox's first statements send strings and numbers, which always encode.
//
// A deferredTx is not safe for concurrent use, as no pgx transaction is.
type deferredTx struct {
	conn   *pgx.Conn
	pooled *pgxpool.Conn // returned to its pool when the transaction ends; nil for a connection the caller holds
	begin  string        // the BEGIN statement, with the options' isolation level and access mode
	state  txState

	savepoints int64 // savepoints made so far, for their names

	// A statement held back to go with the next one (deferExec), and what became of it.
	deferredSQL string
	deferred    deferredState
	deferredErr error

	// The batch of a statement that carries BEGIN or a held-back statement, and its row, kept here so that they
	// need no allocation of their own: the connection sends one such batch at a time.
	batch  pgx.Batch
	queued [4]pgx.QueuedQuery
	queue  [4]*pgx.QueuedQuery
	first  firstRow

	// The batch members' first statements (execPipelined), and the queries it holds, reused from one pipeline
	// to the next: one allocation a batch, where pgx's Batch.Queue makes one a statement.
	pipe  pgx.Batch
	piped []pgx.QueuedQuery
}

// deferredState is where a held-back statement is.
type deferredState uint8

const (
	noDeferred     deferredState = iota
	deferredQueued               // waiting for the next statement
	deferredRan                  // sent; deferredErr is the server's answer
)

type txState uint8

const (
	// pending: BEGIN has not run; Commit and Rollback have nothing to end.
	pending txState = iota
	// begun: BEGIN ran on the server, which holds the transaction, running or failed.
	begun
	// failedFirst: the server refused the first statement (it could not prepare it) before BEGIN ran. With pgx's
	// own transaction that refusal would have failed the transaction; this state keeps the same contract: later
	// statements fail and Commit reports ErrTxCommitRollback.
	failedFirst
	// closed: Commit or Rollback was called.
	closed
)

// BEGIN statements for the options the inbox asks for, spelled as pgx.TxOptions spells them.
const (
	beginDefault            = "begin"
	beginReadCommitted      = "begin isolation level read committed"
	beginReadOnly           = "begin read only"
	beginReadCommittedRO    = "begin isolation level read committed read only"
	savepointNamePrefix     = "sp_"
	commitSQL, rollbackSQL  = "commit", "rollback"
	releaseSavepointPrefix  = "release savepoint " + savepointNamePrefix
	rollbackSavepointPrefix = "rollback to savepoint " + savepointNamePrefix
)

func beginSQL(readCommitted, readOnly bool) string {
	switch {
	case readCommitted && readOnly:
		return beginReadCommittedRO
	case readCommitted:
		return beginReadCommitted
	case readOnly:
		return beginReadOnly
	}
	return beginDefault
}

func newDeferredTx(conn *pgx.Conn, pooled *pgxpool.Conn, begin string) *deferredTx {
	return &deferredTx{conn: conn, pooled: pooled, begin: begin}
}

// errAborted returns what PostgreSQL answers a statement in a failed transaction; a transaction whose first
// statement was refused before BEGIN ran answers it too, as pgx's own would have got it from the server.
func errAborted() error {
	return &pgconn.PgError{
		Severity: "ERROR",
		Code:     "25P02",
		Message:  "current transaction is aborted, commands ignored until end of transaction block",
	}
}

// usable reports why no statement may run, if one may not.
func (t *deferredTx) usable() error {
	switch t.state {
	case closed:
		return pgx.ErrTxClosed
	case failedFirst:
		return errAborted()
	}
	return nil
}

// ensureBegun sends BEGIN, then a held-back statement, each on its own, for a statement that cannot carry them.
func (t *deferredTx) ensureBegun(ctx context.Context) error {
	if err := t.usable(); err != nil {
		return err
	}
	if t.state == pending {
		if _, err := t.conn.Exec(ctx, t.begin); err != nil {
			// As pgx.Conn.BeginTx: a failed BEGIN leaves the connection in doubt, so it is not reused.
			closeNow(t.conn)
			return err
		}
		t.state = begun
	}
	if t.deferred == deferredQueued {
		_, err := t.conn.Exec(ctx, t.deferredSQL)
		t.ran(err)
		return err
	}
	return nil
}

// leads reports whether the next statement must carry others: BEGIN, or a held-back statement.
func (t *deferredTx) leads() bool {
	return t.state == pending || (t.state == begun && t.deferred == deferredQueued)
}

// deferExec holds query, a statement without arguments whose answer nobody waits for, back until the
// transaction's next statement, and sends it in one batch with that one: a savepoint costs no round trip of its
// own, and none at all when no statement follows. A statement that cannot carry it (one without arguments:
// see carriesBegin) sends it on its own first. endDeferred says what became of it.
func (t *deferredTx) deferExec(query string) {
	t.deferredSQL, t.deferred, t.deferredErr = query, deferredQueued, nil
}

// endDeferred reports whether the statement deferExec held back ran and, if it did, the server's answer to it; one
// that is still held back is dropped, as if it had never been asked for.
func (t *deferredTx) endDeferred() (ran bool, err error) {
	ran, err = t.deferred == deferredRan, t.deferredErr
	t.deferredSQL, t.deferred, t.deferredErr = "", noDeferred, nil
	return ran, err
}

// ran records the answer to the held-back statement. One that never reached the server (pgx refused the batch's
// arguments before it wrote anything) stays held back; a broken connection fails whatever comes next anyway.
func (t *deferredTx) ran(err error) {
	if pgErr := (*pgconn.PgError)(nil); err == nil || errors.As(err, &pgErr) {
		t.deferred, t.deferredErr = deferredRan, err
	}
}

// carriesBegin reports whether a first statement with args can go in one batch with BEGIN: it needs arguments
// (see deferredTx), and none of the options a batch does not take (a query rewriter such as pgx.NamedArgs it does).
func carriesBegin(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return false
	}
	return true
}

// withLead returns the batch of the statements the next one carries (BEGIN, a held-back statement) and that one.
func (t *deferredTx) withLead(sql string, args []any) *pgx.Batch {
	n := 0
	if t.state == pending {
		t.queued[n] = pgx.QueuedQuery{SQL: t.begin}
		n++
	}
	if t.deferred == deferredQueued {
		t.queued[n] = pgx.QueuedQuery{SQL: t.deferredSQL}
		n++
	}
	t.queued[n] = pgx.QueuedQuery{SQL: sql, Arguments: args}
	for k := range n + 1 {
		t.queue[k] = &t.queued[k]
	}
	t.batch.QueuedQueries = t.queue[:n+1]
	return &t.batch
}

// readLead reads the answers to what withLead put before the statement, and returns the first error. A BEGIN's
// outcome is recorded by sent, once the batch is closed.
func (t *deferredTx) readLead(br pgx.BatchResults) error {
	if t.state == pending {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if t.deferred == deferredQueued {
		_, err := br.Exec()
		t.ran(err)
		return err
	}
	return nil
}

// send sends the statement with what it carries, and reads the answers to those; the statement's are next in br.
func (t *deferredTx) send(ctx context.Context, sql string, args []any) (br pgx.BatchResults, beginning bool, err error) {
	beginning = t.state == pending
	br = t.conn.SendBatch(ctx, t.withLead(sql, args))
	return br, beginning, t.readLead(br)
}

// sent records what the first statement's batch did, from the server's own transaction status: BEGIN ran
// (whatever became of the statement), or it did not and the server refused the statement (a statement it
// cannot prepare fails before anything runs), or nothing reached the server (an argument pgx cannot encode), and
// the transaction is as new.
func (t *deferredTx) sent(err error) {
	switch t.conn.PgConn().TxStatus() {
	case 'T', 'E':
		t.state = begun
	default:
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) {
			t.state = failedFirst
		}
	}
}

// Exec runs sql in the transaction, carrying BEGIN or a held-back statement if they wait.
func (t *deferredTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.leads() && carriesBegin(args) {
		br, beginning, err := t.send(ctx, sql, args)
		var tag pgconn.CommandTag
		if err == nil {
			tag, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if beginning {
			t.sent(err)
		}
		return tag, err
	}
	if err := t.ensureBegun(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.conn.Exec(ctx, sql, args...)
}

// QueryRow runs sql in the transaction, carrying BEGIN or a held-back statement if they wait; its row is then read
// when scanned.
func (t *deferredTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.leads() && carriesBegin(args) {
		br, beginning, err := t.send(ctx, sql, args)
		if err != nil {
			_ = br.Close() // reports err again
			if beginning {
				t.sent(err)
			}
			return errRow{err}
		}
		first := &t.first
		if first.br != nil {
			first = new(firstRow) // the last one was never scanned
		}
		*first = firstRow{t: t, br: br, row: br.QueryRow(), beginning: beginning}
		return first
	}
	if err := t.ensureBegun(ctx); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

// firstRow is the row of a statement sent with BEGIN or a held-back statement: scanning it ends the batch.
type firstRow struct {
	t         *deferredTx
	br        pgx.BatchResults
	row       pgx.Row
	beginning bool // the batch carried BEGIN
}

func (r *firstRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	if r.beginning {
		r.t.sent(err)
	}
	r.br, r.row = nil, nil
	return err
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Query runs sql in the transaction, carrying BEGIN or a held-back statement if they wait. As pgx's, it returns
// rows even with an error, which they report too, so that pgx.CollectRows(tx.Query(...)) works either way.
func (t *deferredTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.leads() && carriesBegin(args) {
		br, beginning, err := t.send(ctx, sql, args)
		if err != nil {
			_ = br.Close()
			if beginning {
				t.sent(err)
			}
			return errRows{t.conn, err}, err
		}
		rows, err := br.Query()
		r := &batchRows{Rows: rows, t: t, br: br, beginning: beginning}
		if err != nil {
			r.Close() // as pgx's rows of a query that failed: already closed, the connection free
		}
		return r, err
	}
	if err := t.ensureBegun(ctx); err != nil {
		return errRows{t.conn, err}, err
	}
	return t.conn.Query(ctx, sql, args...)
}

// batchRows is the rows of a query sent with BEGIN or a held-back statement: closing them ends the batch.
type batchRows struct {
	pgx.Rows
	t         *deferredTx
	br        pgx.BatchResults
	beginning bool
	closed    bool
	err       error // the batch's, when the rows had none
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close() // as pgx's rows close themselves at the end
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	err := r.Rows.Err()
	if cerr := r.br.Close(); err == nil && cerr != nil {
		err, r.err = cerr, cerr
	}
	if r.beginning {
		r.t.sent(err)
	}
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// SendBatch sends b in the transaction, after BEGIN if it is the first use.
func (t *deferredTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if err := t.ensureBegun(ctx); err != nil {
		return errBatch{t.conn, err}
	}
	return t.conn.SendBatch(ctx, b)
}

// CopyFrom copies rows in the transaction, after BEGIN if it is the first use.
func (t *deferredTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.ensureBegun(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, columns, src)
}

// Prepare prepares sql on the transaction's connection, after BEGIN if it is the first use.
func (t *deferredTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.ensureBegun(ctx); err != nil {
		return nil, err
	}
	return t.conn.Prepare(ctx, name, sql)
}

// LargeObjects returns the large objects API over the transaction. Its calls go through the transaction's Exec and
// QueryRow, so the first of them carries BEGIN if nothing else ran.
func (t *deferredTx) LargeObjects() pgx.LargeObjects { return largeObjects(t) }

// Conn returns the connection the transaction runs on.
func (t *deferredTx) Conn() *pgx.Conn { return t.conn }

// Begin starts a pseudo nested transaction, a savepoint, as pgx's own transaction does.
func (t *deferredTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := t.ensureBegun(ctx); err != nil {
		return nil, err
	}
	t.savepoints++
	n := strconv.FormatInt(t.savepoints, 10)
	if _, err := t.conn.Exec(ctx, "savepoint "+savepointNamePrefix+n); err != nil {
		return nil, err
	}
	return &savepoint{tx: t, name: n}, nil
}

// Commit commits the transaction, and returns its connection to the pool.
func (t *deferredTx) Commit(ctx context.Context) error {
	if t.state == closed {
		return pgx.ErrTxClosed
	}
	defer t.end()
	switch {
	case t.state == pending && !t.conn.IsClosed():
		return nil // nothing ran: nothing to commit (a closed connection reports itself below, as pgx's would)
	case t.state == failedFirst:
		return pgx.ErrTxCommitRollback
	}
	tag, err := t.conn.Exec(ctx, commitSQL)
	return t.commitEnded(ctx, tag, err)
}

// commitEnded reports a COMMIT that answered tag or err as pgx's own transactions do: a COMMIT of a failed
// transaction answers ROLLBACK. A connection that a failed COMMIT left in a transaction is closed, so that the
// pool does not hand it out again; the error to report is err.
func (t *deferredTx) commitEnded(ctx context.Context, tag pgconn.CommandTag, err error) error {
	if err != nil {
		if t.conn.PgConn().TxStatus() != 'I' {
			_ = t.conn.Close(ctx)
		}
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// commitWith sends sql, with BEGIN or a held-back statement if they wait, and COMMIT after it, in one batch: one
// round trip. ran reports that sql succeeded, and err is then COMMIT's, as Commit reports it, and the transaction has
// ended. When sql fails, PostgreSQL skips the COMMIT that follows it in the batch: ran is false, err is sql's, and
// the transaction is left failed, for Rollback. A statement without arguments cannot go in the batch (see
// carriesBegin): it is sent first, then COMMIT.
func (t *deferredTx) commitWith(ctx context.Context, sql string, args []any) (ran bool, err error) {
	if err := t.usable(); err != nil {
		return false, err
	}
	if !carriesBegin(args) {
		if _, err := t.Exec(ctx, sql, args...); err != nil {
			return false, err
		}
		return true, t.Commit(ctx)
	}
	beginning := t.state == pending
	b := t.withLead(sql, args)
	n := len(b.QueuedQueries)
	t.queued[n] = pgx.QueuedQuery{SQL: commitSQL}
	t.queue[n] = &t.queued[n]
	b.QueuedQueries = t.queue[:n+1]
	br := t.conn.SendBatch(ctx, b)
	err = t.readLead(br)
	if err == nil {
		_, err = br.Exec()
		ran = err == nil
	}
	var tag pgconn.CommandTag
	if ran {
		tag, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if beginning {
		t.sent(err)
	}
	if !ran {
		return false, err
	}
	defer t.end()
	return true, t.commitEnded(ctx, tag, err)
}

// Rollback rolls the transaction back, and returns its connection to the pool. It is safe to call after Commit,
// when it returns ErrTxClosed.
func (t *deferredTx) Rollback(ctx context.Context) error {
	if t.state == closed {
		return pgx.ErrTxClosed
	}
	defer t.end()
	if t.state != begun {
		return nil
	}
	if _, err := t.conn.Exec(ctx, rollbackSQL); err != nil {
		closeNow(t.conn) // a failed ROLLBACK leaves the connection in an unknown state
		return err
	}
	return nil
}

func (t *deferredTx) end() {
	t.state = closed
	t.deferredSQL, t.deferred, t.deferredErr = "", noDeferred, nil
	t.first = firstRow{}
	t.batch.QueuedQueries = nil
	t.queued = [4]pgx.QueuedQuery{}
	if t.pooled != nil {
		t.pooled.Release() // the pool closes a connection left busy, closed or in a transaction
		t.pooled = nil
	}
}

// closeNow closes conn without waiting on the server, as pgx closes a connection it no longer trusts.
func closeNow(conn *pgx.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = conn.Close(ctx)
}
