package mysqlinbox_test

import (
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// hostileSession is what a handler, a pool hook or the application may have left on a pooled connection before
// the inbox uses it: statements run on the session, in order.
type hostileSession struct {
	name string
	set  []string
}

// hostileSessions are the sessions the security tests run the inbox on: each of the multibyte character sets whose
// second bytes include 0x5c and 0x27's neighbours, switched with SET NAMES (client, connection and results at once)
// and with character_set_client alone (so that the server converts every string parameter on the way in), a
// connection character set that is not ASCII-compatible, and utf8mb4 as the control; each with and without
// NO_BACKSLASH_ESCAPES, which changes what a quoting client would have to write.
var hostileSessions = func() []hostileSession {
	charsets := []string{
		"SET NAMES utf8mb4",
		"SET NAMES sjis", "SET NAMES gbk", "SET NAMES big5",
		"SET character_set_client = sjis", "SET character_set_client = gbk", "SET character_set_client = big5",
		"SET character_set_connection = ucs2",
	}
	var out []hostileSession
	for _, mode := range []string{"", "NO_BACKSLASH_ESCAPES"} {
		for _, cs := range charsets {
			// Each starts from the defaults, so that a fuzz iteration can switch a session it used before.
			set := []string{"SET NAMES utf8mb4", "SET SESSION sql_mode = DEFAULT"}
			name := cs
			if mode != "" {
				set = append(set, "SET SESSION sql_mode = CONCAT(@@sql_mode, ',"+mode+"')")
				name += ", " + mode
			}
			out = append(out, hostileSession{name: name, set: append(set, cs)})
		}
	}
	return out
}()

// attackIDs are event IDs that would break out of a quoted literal that a client escaped for one character set
// while the server reads another: a multibyte lead byte right before the escaper's backslash (C2 81 5C is a
// half-width katakana and a double-byte character in SJIS; E4 B8 AD 5C is two double-byte characters in GBK and
// BIG5), quotes, backticks, comments, and what PostgreSQL's reproducer in issue 40 used.
var attackIDs = []string{
	"\u0081\\', 'd'); DROP TABLE probe; --",
	"\u0081'), ('wallet-credits', 'spoofed', 'done', UTC_TIMESTAMP(6)) -- ",
	"中'), ('wallet-credits', 'spoofed', 'done', UTC_TIMESTAMP(6)) -- ",
	"\u00bf' OR 1=1 --",
	"中' OR '1'='1",
	"ﾂ―'", // what SJIS made of the first ID on PostgreSQL
	"\u0081\\",
	"\\' \" ` ``; DROP TABLE probe; /* */ # --",
	"`probe`; DROP TABLE `probe`",
	"evt-plain",
}

// openHostile opens a database of one connection and switches its session; the inbox then meets that session on
// every statement.
func openHostile(t testing.TB, s hostileSession) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", testDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	switchSession(t, db, s)
	return db
}

func switchSession(t testing.TB, db *sql.DB, s hostileSession) {
	t.Helper()
	for _, stmt := range s.set {
		_, err := db.Exec(stmt)
		require.NoError(t, err, stmt)
	}
}

var probeOnce sync.Once

// probeRows creates, once per database, the table the attack IDs try to drop, with 3 rows, and returns how many
// rows it has now. Fuzz workers share their parent's database, so creating it is safe to repeat.
func probeRows(t testing.TB) int {
	t.Helper()
	db := openDB(t)
	probeOnce.Do(func() {
		_, err := db.Exec(`CREATE TABLE IF NOT EXISTS probe (n INT PRIMARY KEY)`)
		require.NoError(t, err)
		_, err = db.Exec(`INSERT IGNORE INTO probe (n) VALUES (1), (2), (3)`)
		require.NoError(t, err)
	})
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM probe`).Scan(&n), "the probe table is gone")
	return n
}

// storedIDs reads the event IDs of consumer's rows in table as hex, over the tests' own utf8mb4 connections.
func storedIDs(t testing.TB, table, consumer string) []string {
	t.Helper()
	rows, err := openDB(t).Query(`SELECT HEX(message_id) FROM `+table+` WHERE HEX(consumer) = ? ORDER BY 1`, hexOf(consumer))
	require.NoError(t, err)
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		out = append(out, id)
	}
	require.NoError(t, rows.Err())
	return out
}

func hexOf(s string) string { return strings.ToUpper(hex.EncodeToString([]byte(s))) }

// quoted is s quoted for a failure message, cut to its first 48 bytes.
func quoted(s string) string {
	if len(s) > 48 {
		return fmt.Sprintf("%q... (%d bytes)", s[:48], len(s))
	}
	return fmt.Sprintf("%q", s)
}

// requireSameBytes fails unless got is want byte for byte, naming the first byte that differs.
func requireSameBytes(t testing.TB, want, got, what string) {
	t.Helper()
	if want == got {
		return
	}
	at := 0
	for at < len(want) && at < len(got) && want[at] == got[at] {
		at++
	}
	around := func(s string) string { return hexOf(s[at:min(len(s), at+12)]) }
	require.Failf(t, "the bytes differ", "%s: %d bytes sent, %d stored; from byte %d, sent %s, stored %s",
		what, len(want), len(got), at, around(want), around(got))
}

// hexesOf is each of ids as hex, sorted as storedIDs sorts them.
func hexesOf(ids ...string) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, hexOf(id))
	}
	return out
}

// echoing credits account 1 and produces one message carrying the event ID and bytes that no character set
// converts unchanged, so that a copy's return shows whether the produced row kept its bytes.
func echoing(b *testBundle, calls *atomic.Int64) message.HandlerFunc {
	credit := b.Credit(1, calls)
	return func(msg *message.Message) ([]*message.Message, error) {
		if _, err := credit(msg); err != nil {
			return nil, err
		}
		payload := append([]byte(msg.Metadata.Get(inbox.DefaultIDMetadataKey)), 0x81, 0x5c, 0x27, 0xff, 0x00)
		out := message.NewMessage(watermill.NewUUID(), payload)
		out.Metadata.Set("echo", msg.Metadata.Get(inbox.DefaultIDMetadataKey))
		return []*message.Message{out}, nil
	}
}

// A session switched to another character set or sql_mode neither runs an event ID as SQL nor stores it, or what a
// message produced, changed: through the middleware, alone and in a batch, each attack ID is applied once with its
// row holding exactly its bytes, or refused as invalid without its handler running; its copy is skipped and
// returns what the first run produced, byte for byte; and the probe table the IDs try to drop keeps its rows.
func TestSecurity_AHostileSessionNeitherRunsAnEventIDAsSQLNorStoresItChanged(t *testing.T) {
	t.Parallel()
	probe := probeRows(t)
	for _, s := range hostileSessions {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			db := openHostile(t, s)
			var calls atomic.Int64

			ib, err := mysqlinbox.New(db, b.Options(inbox.WithRejectDelay(time.Nanosecond))...)
			require.NoError(t, err)
			h := ib.Middleware(echoing(b, &calls))
			var applied []string
			for _, id := range attackIDs {
				before := calls.Load()
				out, err := h(newMsg(id))
				if errors.Is(err, inbox.ErrInvalidEventID) {
					require.Equal(t, before, calls.Load(), "%q: a refused ID's handler does not run", id)
					continue
				}
				require.NoError(t, err, "%q", id)
				require.Len(t, out, 1, "%q", id)
				applied = append(applied, id)

				again, err := h(newMsg(id))
				require.NoError(t, err, "%q: the copy", id)
				require.Equal(t, before+1, calls.Load(), "%q: the copy is skipped", id)
				require.Len(t, again, 1, "%q", id)
				require.Equal(t, out[0].UUID, again[0].UUID, "%q", id)
				requireSameBytes(t, string(out[0].Payload), string(again[0].Payload), quoted(id)+": the copy's produced payload")
				require.Equal(t, id, again[0].Metadata.Get("echo"), "%q", id)
				require.Equal(t, probe, probeRows(t), "%q", id)
			}
			require.ElementsMatch(t, hexesOf(applied...), storedIDs(t, b.Table, "wallet-credits"),
				"each applied ID is stored as its bytes, and nothing else is stored")
			require.Equal(t, len(applied), b.Balance(t))

			// A batch of all of them, then a batch of their copies: the multi-row claim, the read of which are
			// there, and the read of their rows.
			batch, err := mysqlinbox.New(db, b.Options(inbox.WithConsumer("wallet-batch"),
				inbox.WithBatch(time.Minute, len(attackIDs)), inbox.WithBatchConcurrency(1))...)
			require.NoError(t, err)
			hb := batch.Middleware(echoing(b, &calls))
			before := calls.Load()
			outs, errs := inboxtest.DeliverTogether(hb, attackIDs)
			var batched []string
			for _, id := range attackIDs {
				if errors.Is(errs[id], inbox.ErrInvalidEventID) {
					continue
				}
				require.NoError(t, errs[id], "%q", id)
				require.Len(t, outs[id], 1, "%q", id)
				batched = append(batched, id)
			}
			require.EqualValues(t, len(batched), calls.Load()-before, "a refused ID's handler does not run")
			require.ElementsMatch(t, hexesOf(batched...), storedIDs(t, b.Table, "wallet-batch"))

			again, errs := inboxtest.DeliverTogether(hb, batched)
			for _, id := range batched {
				require.NoError(t, errs[id], "%q: the copy", id)
				require.Len(t, again[id], 1, "%q", id)
				require.Equal(t, outs[id][0].UUID, again[id][0].UUID, "%q", id)
				requireSameBytes(t, string(outs[id][0].Payload), string(again[id][0].Payload), quoted(id)+": the copy's produced payload")
			}
			require.EqualValues(t, len(batched), calls.Load()-before, "the copies are skipped")
			require.Equal(t, len(applied)+len(batched), b.Balance(t))
			require.Equal(t, probe, probeRows(t))
		})
	}
}

// validText is the documented rule for event IDs and consumer names: 1 to max bytes of valid UTF-8 without NUL.
func validText(s string, max int) bool {
	return s != "" && len(s) <= max && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// storedErrorText is what lease mode documents it stores of an error (inbox.MaxStoredErrorBytes): bytes that are
// not valid UTF-8, and NUL bytes, each replaced by U+FFFD. A longer text is cut, which requireStoredError allows.
func storedErrorText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

func requireStoredError(t *testing.T, sent, stored, what string) {
	t.Helper()
	want := storedErrorText(sent)
	if len(want) <= inbox.MaxStoredErrorBytes {
		requireSameBytes(t, want, stored, what)
		return
	}
	require.LessOrEqual(t, len(stored), inbox.MaxStoredErrorBytes, what)
	require.Greater(t, len(stored), inbox.MaxStoredErrorBytes-8, what)
	require.True(t, strings.HasSuffix(stored, "…"), what)
	require.True(t, strings.HasPrefix(want, strings.TrimSuffix(stored, "…")), "%s: a long error is its own beginning", what)
}

// fuzzStage is what every iteration of the fuzz test shares: an inbox table for transaction mode and one for lease
// mode, and a database of one connection per hostile session.
type fuzzStage struct {
	tx, lease *testBundle
	probe     int
	mu        sync.Mutex
	dbs       map[int]*sql.DB
}

func (s *fuzzStage) db(t *testing.T, n int) *sql.DB {
	s.mu.Lock()
	defer s.mu.Unlock()
	db, ok := s.dbs[n]
	if !ok {
		var err error
		db, err = sql.Open("mysql", testDSN())
		require.NoError(t, err)
		db.SetMaxOpenConns(1)
		s.dbs[n] = db
	}
	// Again on every iteration: a connection the pool replaced would otherwise run with the defaults.
	switchSession(t, db, hostileSessions[n])
	return db
}

// Every value the inbox stores from a message, an option or an error reaches its column as the bytes sent, on any
// of the hostile sessions, or is refused by the documented rules: the event ID (stored as sent, or refused with
// inbox.ErrInvalidEventID when it is not 1 to 2000 bytes of UTF-8 without NUL), the consumer name (refused with
// inbox.ErrInvalidOption by the same rule, at 512 bytes), and a lease-mode handler's error (stored as lease mode
// documents, and handed back as the next attempt's PreviousError). The probe table keeps its rows throughout.
func FuzzSecurity_EveryValueIsStoredAsSentOrRefused(f *testing.F) {
	long := strings.Repeat("é\u0081\\'", 300)
	for n, id := range attackIDs {
		f.Add(id, "wallet-credits", attackIDs[(n+1)%len(attackIDs)], uint8(n*3))
	}
	f.Add("evt-1", "\u0081\\', 'x'); DROP TABLE probe; --", "\u00bf' OR 1=1 --", uint8(1))
	f.Add("中'", "中' OR '1'='1", "中'\\", uint8(2))
	f.Add("evt-\x00-nul", "wallet", "error \x00 with NUL", uint8(3))
	f.Add("evt-\xff\xfe", "consumer-\xc2", "cut \xe2\x82 text \x81\x5c", uint8(5))
	f.Add("evt-ok", "", "", uint8(6))
	f.Add(strings.Repeat("\u0081\\", 500), strings.Repeat("中", 170), long, uint8(9))
	f.Add(strings.Repeat("x", 2001), "c", "e", uint8(10))
	f.Add("`", "`", "`", uint8(13))

	probe := probeRows(f)
	s := &fuzzStage{tx: newBundle(f), lease: newBundle(f), probe: probe, dbs: map[int]*sql.DB{}}
	f.Cleanup(func() {
		for _, db := range s.dbs {
			_ = db.Close()
		}
	})
	f.Fuzz(func(t *testing.T, id, consumer, errText string, session uint8) {
		n := int(session) % len(hostileSessions)
		db := s.db(t, n)
		what := fmt.Sprintf("%s: id %s, consumer %s", hostileSessions[n].name, quoted(id), quoted(consumer))
		clean := openDB(t)
		for _, b := range []*testBundle{s.tx, s.lease} {
			// Iterations may repeat an ID; each starts from no row.
			_, err := clean.Exec(`DELETE FROM `+b.Table+` WHERE HEX(consumer) = ? AND HEX(message_id) = ?`, hexOf(consumer), hexOf(id))
			require.NoError(t, err)
		}

		opts := []inbox.Option{inbox.WithTable(s.tx.Table), inbox.WithConsumer(consumer), inbox.WithMaxIDLength(2000),
			inbox.WithLogger(watermill.NopLogger{}), inbox.WithRejectDelay(time.Nanosecond)} // a refusal is nacked at once
		txMode, err := mysqlinbox.New(db, opts...)
		if !validText(consumer, inbox.MaxConsumerLength) {
			require.ErrorIs(t, err, inbox.ErrInvalidOption, what)
			require.Equal(t, s.probe, probeRows(t))
			return
		}
		require.NoError(t, err, what)

		var calls atomic.Int64
		balance := s.tx.Balance(t)
		rowsBefore := storedIDs(t, s.tx.Table, consumer)
		h := txMode.Middleware(s.tx.Credit(1, &calls))
		_, err = h(newMsg(id))
		if !validText(id, 2000) {
			require.ErrorIs(t, err, inbox.ErrInvalidEventID, what)
			require.Zero(t, calls.Load(), what)
			require.Equal(t, balance, s.tx.Balance(t), what)
			require.Equal(t, s.probe, probeRows(t))
			return
		}
		require.NoError(t, err, what)
		require.ElementsMatch(t, append(rowsBefore, hexOf(id)), storedIDs(t, s.tx.Table, consumer), "%s: the row holds the ID's bytes", what)
		_, err = h(newMsg(id))
		require.NoError(t, err, what)
		require.EqualValues(t, 1, calls.Load(), "%s: the copy is skipped", what)
		require.Equal(t, balance+1, s.tx.Balance(t), what)

		leaseMode, err := mysqlinbox.New(db, append(opts, inbox.WithTable(s.lease.Table), inbox.WithLease(time.Minute))...)
		require.NoError(t, err, what)
		var previous string
		var attempts atomic.Int64
		hl := leaseMode.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			l, ok := inbox.LeaseFromContext(msg.Context())
			require.True(t, ok)
			if attempts.Add(1) == 1 {
				return nil, errors.New(errText)
			}
			previous = l.PreviousError()
			return nil, nil
		})
		_, err = hl(newMsg(id))
		require.Error(t, err, what)
		require.NotErrorIs(t, err, inbox.ErrInvalidEventID, what)
		var stored []byte
		require.NoError(t, clean.QueryRow(`SELECT last_error FROM `+s.lease.Table+` WHERE HEX(consumer) = ? AND HEX(message_id) = ?`,
			hexOf(consumer), hexOf(id)).Scan(&stored), what)
		requireStoredError(t, errText, string(stored), what+": last_error")
		_, err = hl(newMsg(id))
		require.NoError(t, err, what)
		requireSameBytes(t, string(stored), previous, what+": the next attempt's PreviousError")
		require.Equal(t, s.probe, probeRows(t))
	})
}
