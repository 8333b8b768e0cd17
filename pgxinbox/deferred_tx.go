package pgxinbox

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"sync"
	"unsafe"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
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

	pipe pgx.Batch // the batch members' first statements (execPipelined)

	watched watchedBatch // the results of the last batch sent on a context that can be cancelled (sendBatch)
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
	br = t.sendBatch(ctx, t.withLead(sql, args))
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
	return t.sendBatch(ctx, b)
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
	br := t.sendBatch(ctx, b)
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
	t.watched.unwatch() // of a batch left open, whose connection, busy, the pool closes
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
