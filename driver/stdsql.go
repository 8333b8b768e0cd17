package driver

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"
)

// StdSQL returns a Pool over db, for any database/sql driver. Over a nil db the Pool reaches no database: it says
// so (Identifier), and the inbox refuses it when it is built.
func StdSQL(db *sql.DB) Pool {
	p := stdPool{db: db}
	if db != nil && isLibpq(db.Driver()) {
		p.sessions = &sessions{}
	}
	return p
}

// errNilDB is what a Pool over a nil *sql.DB answers, instead of panicking in every transaction.
var errNilDB = errors.New("driver: the *sql.DB is nil")

// StdSQLTx returns a Tx over tx, a transaction someone else began and will end: the inbox only runs statements on
// it (watermill-sql's subscriber transaction, for one).
func StdSQLTx(tx *sql.Tx) Tx { return stdTx{tx: tx} }

type stdPool struct {
	db       *sql.DB
	sessions *sessions // over lib/pq, its connections' SessionState; nil otherwise
}

var _ NativeTyper = stdPool{}

// isLibpq reports whether d is lib/pq's driver, found by its type so that this package need not import it.
// A driver that wraps lib/pq's (for tracing, say) is not recognized, and its statements keep their arguments.
func isLibpq(d sqldriver.Driver) bool {
	t := reflect.TypeOf(d)
	return t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "github.com/lib/pq" && t.Elem().Name() == "Driver"
}

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
	if p.sessions == nil || p.sessions.lost.Load() {
		tx, err := p.db.BeginTx(ctx, o)
		if err != nil {
			return nil, err
		}
		return stdTx{tx: tx, sessions: p.sessions}, nil
	}
	return p.beginOnConn(ctx, o)
}

// beginOnConn begins a transaction on a connection taken from the pool for it, so that the transaction can tell
// which connection it has (SessionState). The connection goes back when the transaction ends. A connection that
// turns out broken at BEGIN is thrown away and another taken, as database/sql's BeginTx does.
func (p stdPool) beginOnConn(ctx context.Context, o *sql.TxOptions) (Tx, error) {
	for tries := 1; ; tries++ {
		conn, err := p.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		var session *sync.Map
		if err := conn.Raw(func(dc any) error { session = p.sessions.of(dc); return nil }); err != nil {
			_ = conn.Close()
			return nil, err
		}
		tx, err := conn.BeginTx(ctx, o)
		if err == nil {
			return stdTx{tx: tx, conn: conn, session: session, sessions: p.sessions}, nil
		}
		_ = conn.Close()
		if !errors.Is(err, sqldriver.ErrBadConn) || tries == 3 {
			return nil, err
		}
	}
}

// sessions holds what the dialect noted about each connection of one pool (SessionState), for as long as the
// connection lives: an entry goes when its connection has been closed and collected.
type sessions struct {
	m    sync.Map // weak.Pointer[byte] to a driver connection -> *sync.Map
	lost atomic.Bool
}

// of returns the notes on the driver connection dc, or nil when dc is not a pointer. dc is known by its address:
// the weak pointer is to its first byte, which keeps nothing alive and names dc whatever its type.
func (s *sessions) of(dc any) *sync.Map {
	v := reflect.ValueOf(dc)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	first := (*byte)(v.UnsafePointer())
	key := weak.Make(first)
	if m, ok := s.m.Load(key); ok {
		return m.(*sync.Map)
	}
	m, loaded := s.m.LoadOrStore(key, &sync.Map{})
	if !loaded {
		runtime.AddCleanup(first, func(k weak.Pointer[byte]) { s.m.Delete(k) }, key)
	}
	return m.(*sync.Map)
}

type stdTx struct {
	tx *sql.Tx
	// Over lib/pq: the connection the transaction holds, given back when it ends (nil once the pool's sessions
	// were lost), the notes on its session, and the pool's notes.
	conn     *sql.Conn
	session  *sync.Map
	sessions *sessions
}

// LiteralArgs is true over lib/pq (see LiteralArgs), whose transactions have sessions, lost or not.
func (t stdTx) LiteralArgs() bool { return t.sessions != nil }

// Session is the notes on the transaction's connection, over lib/pq until SessionLost (see SessionState).
func (t stdTx) Session() *sync.Map {
	if t.sessions == nil || t.sessions.lost.Load() {
		return nil
	}
	return t.session
}

// SessionLost turns the notes off for every connection of the pool (see SessionState).
func (t stdTx) SessionLost() {
	if t.sessions != nil {
		t.sessions.lost.Store(true)
	}
}

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
func (t stdTx) Commit(context.Context) error   { return t.end(t.tx.Commit()) }
func (t stdTx) Rollback(context.Context) error { return t.end(t.tx.Rollback()) }
func (t stdTx) Native() any                    { return t.tx }

// end gives the transaction's connection back to the pool, when it took one of its own.
func (t stdTx) end(err error) error {
	if t.conn != nil {
		_ = t.conn.Close() // a second call, after the transaction ended, does nothing
	}
	return txDone(err)
}

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
