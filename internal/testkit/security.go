package testkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

type PostgresSecurity struct {
	// DSN is the tests' database, of encoding UTF8.
	DSN string
	// Driver is the database/sql driver of the pools that set up and read back: "postgres" or "pgx".
	Driver string
	// Open opens the inbox's pool of one connection to the database of dsn.
	Open func(t testing.TB, dsn string) SessionConn
}

type SessionConn interface {
	// Exec runs query on the pool, and so on its one connection.
	Exec(ctx context.Context, query string) error
	// ExecInTx runs query on the transaction the inbox gave the handler whose context ctx is.
	ExecInTx(ctx context.Context, query string) error
	// NewInbox builds an Inbox over the pool.
	NewInbox(opts ...inbox.Option) (*inbox.Inbox, error)
	// Backend returns the pid of the connection's server process.
	Backend(ctx context.Context) (int, error)
}

func StdSQLSession(db *sql.DB) SessionConn { return stdSession{db} }

type stdSession struct{ db *sql.DB }

func (c stdSession) Exec(ctx context.Context, query string) error {
	_, err := c.db.ExecContext(ctx, query)
	return err
}

func (c stdSession) ExecInTx(ctx context.Context, query string) error {
	tx, ok := inbox.TxFromContext(ctx)
	if !ok {
		return errors.New("no *sql.Tx in the handler's context")
	}
	_, err := tx.ExecContext(ctx, query)
	return err
}

func (c stdSession) NewInbox(opts ...inbox.Option) (*inbox.Inbox, error) {
	return inbox.New(c.db, opts...)
}

func (c stdSession) Backend(ctx context.Context) (pid int, err error) {
	return pid, c.db.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
}

func OpenSessionDB(t testing.TB, driverName, dsn string, conns int) *sql.DB {
	t.Helper()
	SkipWhenShort(t, "PostgreSQL")
	db, err := sql.Open(driverName, WithoutCommitWaits(t, dsn))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("PostgreSQL is not reachable at %s through %s (set INBOX_TEST_DATABASE_URL): %v", dsn, driverName, err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { db.Close() })
	return db
}

func WithoutCommitWaits(t testing.TB, dsn string) string {
	t.Helper()
	return WithSessionOptions(t, dsn, "-c synchronous_commit=off")
}

func WithSessionOptions(t testing.TB, dsn, options string) string {
	t.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " options='" + options + "'"
	}
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("options", options)
	u.RawQuery = q.Encode()
	return u.String()
}

// clientEncodings are the names of every encoding PostgreSQL offers a client (its documentation's table of
// character sets, the client-only ones included); a server refuses those it cannot convert to its own.
var clientEncodings = []string{
	"BIG5", "EUC_CN", "EUC_JP", "EUC_JIS_2004", "EUC_KR", "EUC_TW", "GB18030", "GBK",
	"ISO_8859_5", "ISO_8859_6", "ISO_8859_7", "ISO_8859_8", "JOHAB", "KOI8R", "KOI8U",
	"LATIN1", "LATIN2", "LATIN3", "LATIN4", "LATIN5", "LATIN6", "LATIN7", "LATIN8", "LATIN9", "LATIN10",
	"MULE_INTERNAL", "SJIS", "SHIFT_JIS_2004", "SQL_ASCII", "UHC", "UTF8", "WIN866", "WIN874",
	"WIN1250", "WIN1251", "WIN1252", "WIN1253", "WIN1254", "WIN1255", "WIN1256", "WIN1257", "WIN1258",
}

// The client-only encodings in which a byte of 0x5C (a backslash) can be the second byte of a character: an
// escaper that doubles backslashes byte by byte loses one of them to the character before.
var backslashEatingEncodings = []string{"SJIS", "BIG5", "GBK", "GB18030"}

// clientOnlyEncodings are the encodings PostgreSQL offers a client but cannot store in: a database of SQL_ASCII,
// which cannot convert from them, refuses every byte over 0x7F they send.
var clientOnlyEncodings = []string{"BIG5", "GB18030", "GBK", "JOHAB", "SHIFT_JIS_2004", "SJIS", "UHC"}

var (
	backslashQuotes   = []string{"on", "off", "safe_encoding"}
	conformingStrings = []string{"on", "off"}
)

// secConsumer is the consumer of the cases: the hostile IDs name it, so that a claim they break out of still
// passes the consumer check and the statement after it runs.
const secConsumer = "sec"

// probeMarker stands, in a fuzz input, for the name of the probe table of the process that runs it: fuzz workers
// are processes of their own, each with its own tables, and an input is passed from one to another.
const probeMarker = "{probe}"

// hostileIDs are event IDs that try to end the string literal they would be spliced into and drop probe: each
// closes the claim's argument list as the claim of consumer secConsumer would, so that what follows runs.
func hostileIDs(probe string) map[string]string {
	tail := ", $$d$$, $$" + secConsumer + "$$); DROP TABLE " + probe + "; --"
	return map[string]string{
		// C2 81 5C: in SJIS 81 5C is one character, which takes the first of the two backslashes an escaper
		// writes; the second then escapes the quote (backslash_quote = on), and the doubled quote's second half
		// ends the literal.
		"ABackslashThatSJISSwallows": "\u0081\\'" + tail,
		// E4 B8 A5 5C: in BIG5 E4 B8 is one character and A5 5C the next, which takes the backslash as above.
		"ABackslashThatBIG5Swallows": "严\\'" + tail,
		// E4 B8 81 5C: the same in GBK and GB18030, whose 81 5C is a character.
		"ABackslashThatGBKSwallows": "丁\\'" + tail,
		// C2 BF 27: a lead byte before the quote. No encoding of PostgreSQL has a quote as a second byte, so the
		// doubled quote holds; converted from another encoding the ID would still not be itself.
		"AQuoteAfterALeadByte": "\u00bf'" + tail,
		// What a scanner of placeholders must skip, and does not when it knows only '...', "..." and --.
		"DollarQuotesCommentsAndPlaceholders": "$$ /* ' */ $1 -- \n'); DROP TABLE " + probe + "; -- $2 $$" + tail,
		// A backslash right before a quote, and one before a backslash: E'...' and '...' read them differently.
		"ABackslashBeforeAQuote": `\'` + tail + `\\'` + tail,
	}
}

// secSession is what a case sets on the session of the inbox's one connection.
type secSession struct {
	encoding       string // client_encoding
	backslashQuote string // backslash_quote: on, off or safe_encoding
	conforming     string // standard_conforming_strings: on or off
}

func (s secSession) String() string {
	return fmt.Sprintf("client_encoding=%s,backslash_quote=%s,standard_conforming_strings=%s", s.encoding, s.backslashQuote, s.conforming)
}

// inUTF8 is s with client_encoding UTF8: the session put right.
func (s secSession) inUTF8() secSession { s.encoding = "UTF8"; return s }

// apply sets s with exec, client_encoding last (each statement is ASCII, the same in every encoding).
func (s secSession) apply(ctx context.Context, exec func(ctx context.Context, query string) error) error {
	for _, q := range []string{
		"SET backslash_quote = " + s.backslashQuote,
		"SET standard_conforming_strings = " + s.conforming,
		"SET client_encoding = '" + s.encoding + "'",
	} {
		if err := exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	return nil
}

// fuzzEncodings are the client encodings the fuzz tests pick from: UTF8, those whose second bytes take a
// backslash, and a few that convert without that.
var fuzzEncodings = []string{"UTF8", "SJIS", "BIG5", "GBK", "GB18030", "UHC", "SHIFT_JIS_2004", "LATIN1", "EUC_JP", "WIN1251"}

// fuzzSession turns a fuzz test's numbers into a session.
func fuzzSession(encoding, quote uint8, conforming bool) secSession {
	s := secSession{encoding: fuzzEncodings[int(encoding)%len(fuzzEncodings)], backslashQuote: backslashQuotes[int(quote)%len(backslashQuotes)], conforming: "off"}
	if conforming {
		s.conforming = "on"
	}
	return s
}

// secStage is one database's stage: a Wallet (an inbox table, account 1) reached by a pool of UTF8 sessions that
// sets up, resets and reads back; the inbox's own pool of one connection; and a probe table of three rows, made
// before the stage's first case and checked after each.
type secStage struct {
	*Wallet
	conn   Conn
	admin  *sql.DB
	db     SessionConn // the inbox's: one connection
	probe  string
	server string // the database's server_encoding
	calls  atomic.Int64
	// switchTo, when not nil, is the session the switching handlers set before they return.
	switchTo *secSession
}

// stage sets up a stage in the database of dsn.
func (ps PostgresSecurity) stage(t testing.TB, dsn string) *secStage {
	t.Helper()
	admin := OpenSessionDB(t, ps.Driver, dsn, 4)
	st := &secStage{admin: admin, db: ps.Open(t, WithoutCommitWaits(t, dsn)), conn: StdSQL(admin, inbox.OnSQL(admin), PostgreSQL)}
	st.Wallet = NewWallet(t, st.conn)
	st.probe = st.Table + "_probe"
	t.Cleanup(func() {
		if _, err := admin.Exec(`DROP TABLE IF EXISTS ` + st.probe); err != nil {
			t.Errorf("drop the probe table: %v", err)
		}
	})
	require.NoError(t, admin.QueryRow(`SELECT current_setting('server_encoding')`).Scan(&st.server))
	st.makeProbe(t)
	return st
}

// refuses reports whether the inbox must refuse to store value on a session set to s, with ErrClientEncoding: on
// any session not in UTF8, except in a database of SQL_ASCII, which converts nothing, and where only a session in
// a client-only encoding refuses, and only a value with a byte over 0x7F.
func (st *secStage) refuses(s secSession, value string) bool {
	switch {
	case s.encoding == "UTF8":
		return false
	case st.server != "SQL_ASCII":
		return true
	}
	return slices.Contains(clientOnlyEncodings, s.encoding) && strings.ContainsFunc(value, func(r rune) bool { return r >= utf8.RuneSelf })
}

func (st *secStage) makeProbe(t testing.TB) {
	t.Helper()
	_, err := st.admin.Exec(`DROP TABLE IF EXISTS ` + st.probe + `; CREATE TABLE ` + st.probe + ` AS SELECT generate_series(1, 3) AS n`)
	require.NoError(t, err)
}

// requireProbeIntact fails unless the probe table holds its three rows; after a failure it makes the table anew,
// so that the cases after it fail for what they do, not for what this one did.
func (st *secStage) requireProbeIntact(t testing.TB, what string) {
	t.Helper()
	var n int
	err := st.admin.QueryRow(`SELECT count(*) FROM ` + st.probe).Scan(&n)
	if err != nil || n != 3 {
		st.makeProbe(t)
	}
	require.NoError(t, err, "%s: the probe table is gone: a value ran as SQL", what)
	require.Equal(t, 3, n, "%s: the probe table lost rows: a value ran as SQL", what)
}

// reset empties the inbox table and sets account 1 back to 0.
func (st *secStage) reset(t testing.TB) {
	t.Helper()
	_, err := st.admin.Exec(`DELETE FROM ` + st.Table + `_produced; DELETE FROM ` + st.Table +
		`; UPDATE ` + st.Accounts + ` SET balance = 0`)
	require.NoError(t, err)
}

// set applies s to the inbox's session and returns its backend's pid.
func (st *secStage) set(t testing.TB, s secSession) int {
	t.Helper()
	require.NoError(t, s.apply(context.Background(), st.db.Exec), "%s", s)
	return st.backend(t)
}

func (st *secStage) backend(t testing.TB) int {
	t.Helper()
	pid, err := st.db.Backend(context.Background())
	require.NoError(t, err)
	return pid
}

// stored returns the event IDs of the inbox table's rows and of its produced messages' rows, sorted, as the
// database holds their bytes (convert_to in the database's own encoding converts nothing).
func (st *secStage) stored(t testing.TB) []string {
	t.Helper()
	rows, err := st.admin.Query(`SELECT convert_to(message_id, current_setting('server_encoding')) FROM ` + st.Table +
		` UNION ALL SELECT convert_to(message_id, current_setting('server_encoding')) FROM ` + st.Table + `_produced`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var b []byte
		require.NoError(t, rows.Scan(&b))
		out = append(out, string(b))
	}
	require.NoError(t, rows.Err())
	slices.Sort(out)
	return out
}

// requireStored fails unless the stored event IDs are want, byte for byte.
func (st *secStage) requireStored(t testing.TB, what string, want ...string) {
	t.Helper()
	got := st.stored(t)
	if len(want) == 0 {
		require.Empty(t, got, "%s: nothing is stored", what)
		return
	}
	require.Equal(t, want, got, "%s: stored %q, want %q", what, got, want)
}

// state reads the state of the row of consumer for id, and whether it has none.
func (st *secStage) state(t testing.TB, consumer, id string) (state string, found bool) {
	t.Helper()
	err := st.admin.QueryRow(`SELECT state FROM `+st.Table+`_view WHERE consumer = $1 AND message_id = $2`, consumer, id).Scan(&state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false
	}
	require.NoError(t, err)
	return state, true
}

// newInbox builds an Inbox over the stage's one connection with opts, refused messages nacked at once.
func (st *secStage) newInbox(opts ...inbox.Option) (*inbox.Inbox, error) {
	return st.db.NewInbox(st.Options(append(opts, inbox.WithRejectDelay(time.Millisecond))...)...)
}

// inbox builds an Inbox over the stage's one connection, for secConsumer.
func (st *secStage) inbox(t testing.TB, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	ib, err := st.newInbox(append([]inbox.Option{inbox.WithConsumer(secConsumer)}, opts...)...)
	require.NoError(t, err)
	return ib
}

// credit is the transaction-mode handler: account 1 gains 1 on the inbox's transaction.
func (st *secStage) credit(msg *message.Message) ([]*message.Message, error) {
	st.calls.Add(1)
	return nil, st.db.ExecInTx(msg.Context(), `UPDATE `+st.Accounts+` SET balance = balance + 1 WHERE id = 1`)
}

// switchAndProduce is a transaction-mode handler that credits, sets its transaction's session to st.switchTo
// (SET outlives the statement, and the inbox's statements after the handler run on it), and returns a message
// that carries the event ID, which the inbox stores with its row under the event ID.
func (st *secStage) switchAndProduce(msg *message.Message) ([]*message.Message, error) {
	if _, err := st.credit(msg); err != nil {
		return nil, err
	}
	if st.switchTo != nil {
		if err := st.switchTo.apply(msg.Context(), st.db.ExecInTx); err != nil {
			return nil, err
		}
	}
	out := message.NewMessage(watermill.NewUUID(), []byte(`{"credited":1}`))
	out.Metadata.Set("cause", msg.Metadata.Get(inbox.DefaultIDMetadataKey))
	return []*message.Message{out}, nil
}

// leased is the lease-mode handler: it counts its calls and, when st.switchTo says so, sets the inbox's session
// (lease mode holds no connection while its handler runs), so that the inbox's writes after it run on that; then it
// returns fail's error, when there is a fail.
func (st *secStage) leased(fail func() error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		st.calls.Add(1)
		if st.switchTo != nil {
			if err := st.switchTo.apply(msg.Context(), st.db.Exec); err != nil {
				return nil, err
			}
		}
		if fail != nil {
			return nil, fail()
		}
		return nil, nil
	}
}

// documentedInvalidID reports whether inbox.ErrInvalidEventID's documentation refuses id: empty, longer than max,
// NUL bytes or invalid UTF-8.
func documentedInvalidID(id string, max int) bool {
	return id == "" || len(id) > max || !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0
}

// secMsg returns a message whose metadata carries id as its event ID, even an empty one.
func secMsg(id string) *message.Message {
	msg := NewMessage("x")
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
	return msg
}

// Matrix runs the reproducer of a spliced claim under every client_encoding the server lets a session set, every
// backslash_quote and both standard_conforming_strings, in the tests' database and in one of encoding SQL_ASCII.
func (ps PostgresSecurity) Matrix(t *testing.T) {
	SkipWhenShort(t, "PostgreSQL")
	encodings := ps.settableEncodings(t)
	// A stage costs a migration and a schema check, several cases' worth: the encodings share a few, one per
	// encoding running at a time.
	stages := make(chan *matrixStage, min(runtime.GOMAXPROCS(0), 4))
	for range cap(stages) {
		st := ps.matrixStage(t, ps.DSN)
		require.Equal(t, "UTF8", st.server, "the tests' database converts between encodings")
		stages <- st
	}
	for _, enc := range encodings {
		t.Run("ClientEncoding"+enc, func(t *testing.T) {
			t.Parallel()
			st := <-stages
			defer func() { stages <- st }()
			st.runMatrix(t, enc)
		})
	}
	t.Run("InADatabaseOfEncodingSQL_ASCIIWhichConvertsNothing", func(t *testing.T) {
		t.Parallel()
		st := ps.matrixStage(t, ps.sqlASCIIDatabase(t))
		require.Equal(t, "SQL_ASCII", st.server)
		for _, enc := range []string{"UTF8", "SJIS"} {
			t.Run("ClientEncoding"+enc, func(t *testing.T) { st.runMatrix(t, enc) })
		}
	})
}

// matrixStage is a stage with the matrix's Inbox: transaction mode, dead letters to dead.
type matrixStage struct {
	*secStage
	h    message.HandlerFunc
	dead *RecordingPublisher
}

func (ps PostgresSecurity) matrixStage(t testing.TB, dsn string) *matrixStage {
	t.Helper()
	st := &matrixStage{secStage: ps.stage(t, dsn), dead: &RecordingPublisher{}}
	st.h = st.inbox(t, inbox.WithDeadLetter(st.dead, "dead")).Middleware(st.credit)
	return st
}

// runMatrix sends each hostile ID, and a copy, under enc and every backslash_quote and standard_conforming_strings,
// with the probe table made anew before them.
func (st *matrixStage) runMatrix(t *testing.T, enc string) {
	st.makeProbe(t)
	ids := hostileIDs(st.probe)
	names := slices.Sorted(maps.Keys(ids))
	for _, bq := range backslashQuotes {
		for _, scs := range conformingStrings {
			s := secSession{encoding: enc, backslashQuote: bq, conforming: scs}
			for _, name := range names {
				t.Run(fmt.Sprintf("BackslashQuote_%s_ConformingStrings_%s_%s", bq, scs, name), func(t *testing.T) {
					st.claimCase(t, s, ids[name])
				})
			}
		}
	}
}

// claimCase sends id under s, and then a copy: where the inbox must refuse it (refuses), the message is refused
// with ErrClientEncoding, nothing stored or dead-lettered, and applied once, exactly, when it comes again on the
// session put right; anywhere else it is applied once and its ID stored exactly.
func (st *matrixStage) claimCase(t *testing.T, s secSession, id string) {
	st.reset(t)
	calls, dead := st.calls.Load(), len(st.dead.Messages("dead"))
	pid := st.set(t, s)
	_, err := st.h(secMsg(id))
	require.Equal(t, pid, st.backend(t), "the inbox ran on the session the case set")
	st.requireProbeIntact(t, s.String())
	if st.refuses(s, id) {
		require.ErrorIs(t, err, inbox.ErrClientEncoding, "%s", s)
		require.Equal(t, calls, st.calls.Load(), "the handler did not run")
		st.requireStored(t, s.String())
		require.Zero(t, st.Balance(t))
		require.Len(t, st.dead.Messages("dead"), dead, "a message refused for its session is never dead-lettered")
		st.set(t, s.inUTF8()) // the nacked message comes again
		_, err = st.h(secMsg(id))
		st.requireProbeIntact(t, s.String())
	}
	require.NoError(t, err, "%s", s)
	require.Len(t, st.dead.Messages("dead"), dead, "a valid ID is never dead-lettered")
	require.Equal(t, calls+1, st.calls.Load(), "applied once")
	st.requireStored(t, s.String(), id)

	_, err = st.h(secMsg(id)) // a copy
	require.NoError(t, err)
	require.Equal(t, calls+1, st.calls.Load(), "the copy is skipped")
	require.Equal(t, 1, st.Balance(t), "the effect is applied once")
	st.requireStored(t, s.String(), id)
	st.requireProbeIntact(t, s.String())
}

// settableEncodings returns the client encodings of clientEncodings that the server lets a session set, logging the
// others, and requires the ones whose second bytes take a backslash among them.
func (ps PostgresSecurity) settableEncodings(t *testing.T) []string {
	t.Helper()
	db := OpenSessionDB(t, ps.Driver, ps.DSN, 1)
	var ok []string
	for _, enc := range clientEncodings {
		if _, err := db.Exec(`SET client_encoding = '` + enc + `'`); err != nil {
			t.Logf("the server refuses client_encoding %s: %v", enc, err)
			continue
		}
		ok = append(ok, enc)
		_, err := db.Exec(`SET client_encoding = 'UTF8'`)
		require.NoError(t, err)
	}
	for _, enc := range backslashEatingEncodings {
		require.Contains(t, ok, enc, "a session may set client_encoding %s", enc)
	}
	return ok
}

// sqlASCIIDatabase creates a database of encoding SQL_ASCII on the server of the tests' database, drops it when
// the test ends, and returns its DSN.
func (ps PostgresSecurity) sqlASCIIDatabase(t *testing.T) string {
	t.Helper()
	db := OpenSessionDB(t, ps.Driver, ps.DSN, 1)
	name := UniqueName("inbox_sec_ascii")
	_, err := db.Exec(`CREATE DATABASE ` + name + ` WITH ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'`)
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := db.Exec(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	dsn, err := withPostgresDatabase(ps.DSN, name)
	require.NoError(t, err)
	return dsn
}
