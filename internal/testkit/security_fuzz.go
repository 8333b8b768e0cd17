package testkit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// The fuzz tests of PostgresSecurity: a fuzzed event ID, consumer name or error text under a fuzzed session.

// The paths an event ID takes to SQL, for FuzzEventID.
const (
	pathClaim        = iota // transaction mode: the claim, on the session as the input set it
	pathLeaseClaim          // lease mode: the claim, on that session
	pathLeaseWrites         // lease mode: the handler sets the session, and the 'done' write runs on it
	pathProducedSave        // transaction mode: the handler sets its transaction's session and produces a message
	pathCount
)

// secSeeds are the strings every fuzz test starts from: the hostile IDs (naming the probe table by probeMarker),
// NUL bytes, invalid UTF-8, characters of every width, and long strings around the limits.
func secSeeds() []string {
	seeds := []string{
		"evt-1", "", "\x00", "a\x00b", "\xff", "a\xc3", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf",
		"\u0081", "\u0081\\", "\\", "'", "''", `\'`, "$$", "$1", "--", "/*", "*/", "ü", "ﾂ―'", "€", "🚀",
		strings.Repeat("é", 1000), strings.Repeat("a", 255), strings.Repeat("a", 256), strings.Repeat("a", 2000),
		strings.Repeat("a", 2001), strings.Repeat("\u0081\\'", 300), strings.Repeat("x", 3000),
		strings.Repeat("a", inbox.MaxStoredErrorBytes-4) + "é€", strings.Repeat("a", inbox.MaxStoredErrorBytes) + "\xff",
	}
	for _, id := range slices.Sorted(maps.Values(hostileIDs(probeMarker))) {
		seeds = append(seeds, id, id+"\x00", id+"\xff")
	}
	return seeds
}

// secSeedSessions are the sessions the seeds run under: the fuzzEncodings indexes of UTF8, SJIS, BIG5, GBK,
// GB18030 and LATIN1 (the other settings vary below).
var secSeedSessions = []uint8{0, 1, 2, 3, 4, 7}

// FuzzEventID sends a fuzzed event ID under a fuzzed session along each path of an event ID to SQL: it is stored
// exactly, or refused as documented, and the probe table keeps its rows.
func (ps PostgresSecurity) FuzzEventID(f *testing.F) {
	for n, id := range secSeeds() {
		enc := secSeedSessions[n%len(secSeedSessions)]
		for path := range uint8(pathCount) {
			f.Add(id, enc, uint8(0), n%2 == 0, path)
		}
	}
	for _, id := range slices.Sorted(maps.Values(hostileIDs(probeMarker))) {
		for _, enc := range secSeedSessions {
			for quote := range uint8(len(backslashQuotes)) {
				f.Add(id, enc, quote, quote%2 == 0, uint8(pathClaim))
			}
		}
	}
	st := ps.stage(f, ps.DSN)
	const maxID = 2000
	handlers := [pathCount]message.HandlerFunc{
		pathClaim:        st.inbox(f, inbox.WithMaxIDLength(maxID)).Middleware(st.credit),
		pathLeaseClaim:   st.inbox(f, inbox.WithMaxIDLength(maxID), inbox.WithLease(time.Hour)).Middleware(st.leased(nil)),
		pathLeaseWrites:  st.inbox(f, inbox.WithMaxIDLength(maxID), inbox.WithLease(time.Hour)).Middleware(st.leased(nil)),
		pathProducedSave: st.inbox(f, inbox.WithMaxIDLength(maxID)).Middleware(st.switchAndProduce),
	}
	f.Fuzz(func(t *testing.T, raw string, encoding, quote uint8, conforming bool, path uint8) {
		id := strings.ReplaceAll(raw, probeMarker, st.probe)
		s := fuzzSession(encoding, quote, conforming)
		p := int(path) % pathCount
		switched := p == pathLeaseWrites || p == pathProducedSave
		st.reset(t)
		before := s
		st.switchTo = nil
		if switched {
			before, st.switchTo = s.inUTF8(), &s
		}
		defer func() { st.switchTo = nil }()
		calls := st.calls.Load()
		pid := st.set(t, before)
		first, err := handlers[p](secMsg(id))
		require.Equal(t, pid, st.backend(t), "the inbox ran on the session the input set")
		what := fmt.Sprintf("%q on path %d under %s", id, p, s)
		st.requireProbeIntact(t, what)
		ran := st.calls.Load() - calls

		if documentedInvalidID(id, maxID) {
			require.ErrorIs(t, err, inbox.ErrInvalidEventID, what)
			require.Zero(t, ran, "%s: the handler did not run", what)
			st.requireStored(t, what)
			return
		}
		refused := errors.Is(err, inbox.ErrClientEncoding)
		switch {
		case refused && (p == pathClaim || p == pathLeaseClaim):
			require.True(t, st.refuses(s, id), "%s: refused on a session it may claim on", what)
			require.Zero(t, ran, "%s: the handler did not run", what)
			st.requireStored(t, what)
		case refused && p == pathLeaseWrites:
			require.True(t, st.refuses(s, id), "%s: refused on a session it may write on", what)
			require.EqualValues(t, 1, ran, what)
			st.requireStored(t, what, id)
			state, _ := st.state(t, secConsumer, id)
			require.Equal(t, "processing", state, "%s: the lease stays the holder's until it ends", what)
			return // a copy would wait for the hour-long lease
		case refused: // pathProducedSave: the transaction rolled back
			require.True(t, st.refuses(s, id), "%s: refused on a session it may write on", what)
			require.EqualValues(t, 1, ran, what)
			st.requireStored(t, what)
			require.Zero(t, st.Balance(t), "%s: the effect rolled back", what)
		default:
			require.NoError(t, err, what)
			require.True(t, switched || !st.refuses(s, id), "%s: claimed on a session it must refuse", what)
			require.EqualValues(t, 1, ran, "%s: applied once", what)
			st.checkApplied(t, what, p, id)
		}

		// A copy, or the refused message again, on the session put right.
		st.switchTo = nil
		st.set(t, s.inUTF8())
		again, err := handlers[p](secMsg(id))
		require.NoError(t, err, what)
		runs := int64(1)
		if refused {
			runs += ran // a run whose transaction was refused rolled back, and the message runs again
		}
		require.Equal(t, runs, st.calls.Load()-calls, "%s: run once more when refused, skipped when applied", what)
		st.checkApplied(t, what, p, id)
		st.requireProbeIntact(t, what)
		if p == pathProducedSave && !refused {
			require.Len(t, again, 1)
			require.Len(t, first, 1)
			require.Equal(t, first[0].UUID, again[0].UUID, "%s: the copy sends the same message", what)
			require.Equal(t, first[0].Metadata, again[0].Metadata, "%s: the copy sends the same message", what)
			require.Equal(t, id, again[0].Metadata.Get("cause"), what)
		}
	})
}

// checkApplied checks what a message applied along path p left: its ID stored exactly (twice with a produced
// message), the effect once, a lease-mode row done.
func (st *secStage) checkApplied(t *testing.T, what string, p int, id string) {
	t.Helper()
	switch p {
	case pathClaim:
		st.requireStored(t, what, id)
		require.Equal(t, 1, st.Balance(t), what)
	case pathProducedSave:
		st.requireStored(t, what, id, id)
		require.Equal(t, 1, st.Balance(t), what)
	default:
		st.requireStored(t, what, id)
		state, _ := st.state(t, secConsumer, id)
		require.Equal(t, "done", state, what)
	}
}

// documentedInvalidConsumer reports whether WithConsumer's documentation refuses name: not valid UTF-8 of 1 to
// MaxConsumerLength bytes without NUL.
func documentedInvalidConsumer(name string) bool {
	return name == "" || len(name) > inbox.MaxConsumerLength || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0
}

// FuzzConsumerName names the consumer with a fuzzed name under a fuzzed session, in transaction and lease mode:
// the name the inbox registers and its rows carry is the name given, or the option is refused.
func (ps PostgresSecurity) FuzzConsumerName(f *testing.F) {
	for n, name := range secSeeds() {
		f.Add(name, secSeedSessions[n%len(secSeedSessions)], uint8(0), n%2 == 0, n%3 == 0)
	}
	st := ps.stage(f, ps.DSN)
	var seq, lastConsumer atomic.Int64
	f.Fuzz(func(t *testing.T, raw string, encoding, quote uint8, conforming, lease bool) {
		name := strings.ReplaceAll(raw, probeMarker, st.probe)
		s := fuzzSession(encoding, quote, conforming)
		what := fmt.Sprintf("consumer %q under %s", name, s)
		opts := []inbox.Option{inbox.WithConsumer(name)}
		h := message.HandlerFunc(st.credit)
		if lease {
			opts, h = append(opts, inbox.WithLease(time.Hour)), st.leased(nil)
		}
		ib, err := st.newInbox(opts...)
		if documentedInvalidConsumer(name) {
			require.ErrorIs(t, err, inbox.ErrInvalidOption, what)
			return
		}
		require.NoError(t, err, what)
		if lastConsumer.Load() > 32000 { // a table holds 32,767 consumers: go on in a fresh one
			old := st.Table
			st.Table = UniqueName("inbox_sec_names")
			require.NoError(t, inbox.OnSQL(st.admin).Migrate(context.Background(), inbox.WithTable(st.Table)))
			DropInbox(t, st.conn, old)
			lastConsumer.Store(0)
			ib, err = st.newInbox(opts...)
			require.NoError(t, err)
		}
		id := fmt.Sprintf("evt-%d", seq.Add(1))
		mw := ib.Middleware(h)
		calls := st.calls.Load()
		pid := st.set(t, s)
		_, err = mw(secMsg(id))
		require.Equal(t, pid, st.backend(t), "the inbox ran on the session the input set")
		st.requireProbeIntact(t, what)
		st.requireNewConsumers(t, what, &lastConsumer, name)
		if !st.refuses(s, name) {
			require.NoError(t, err, what)
		} else {
			require.ErrorIs(t, err, inbox.ErrClientEncoding, what)
			require.Equal(t, calls, st.calls.Load(), "%s: the handler did not run", what)
			_, found := st.state(t, name, id)
			require.False(t, found, "%s: nothing is stored", what)
			st.set(t, s.inUTF8()) // the nacked message comes again
			_, err = mw(secMsg(id))
			require.NoError(t, err, what)
			st.requireNewConsumers(t, what, &lastConsumer, name)
		}
		require.Equal(t, calls+1, st.calls.Load(), "%s: applied once", what)
		require.Equal(t, name, st.consumerOf(t, id), what)
		_, err = mw(secMsg(id)) // a copy
		require.NoError(t, err, what)
		require.Equal(t, calls+1, st.calls.Load(), "%s: the copy is skipped", what)
		st.requireProbeIntact(t, what)
	})
}

// consumerOf returns, byte for byte, the consumer name the row of id carries.
func (st *secStage) consumerOf(t testing.TB, id string) string {
	t.Helper()
	var b []byte
	require.NoError(t, st.admin.QueryRow(`SELECT convert_to(consumer, current_setting('server_encoding')) FROM `+
		st.Table+`_view WHERE message_id = $1`, id).Scan(&b))
	return string(b)
}

// requireNewConsumers fails unless every consumer name registered after the id in last is name, byte for byte:
// a name registered changed would be a value stored other than it came.
func (st *secStage) requireNewConsumers(t testing.TB, what string, last *atomic.Int64, name string) {
	t.Helper()
	rows, err := st.admin.Query(`SELECT id, convert_to(name, current_setting('server_encoding')) FROM `+st.Table+
		`_consumers WHERE id > $1 ORDER BY id`, last.Load())
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			id int64
			b  []byte
		)
		require.NoError(t, rows.Scan(&id, &b))
		last.Store(id)
		require.Equal(t, name, string(b), "%s: the consumer registered as %q", what, b)
	}
	require.NoError(t, rows.Err())
}

// storedErrorText is what lease mode documents it stores of a handler's error text: every run of bytes that are
// not valid UTF-8, and every NUL byte, becomes U+FFFD; a text then longer than inbox.MaxStoredErrorBytes is cut at
// a character boundary to end in "…" within that many bytes.
func storedErrorText(text string) string {
	var b strings.Builder
	invalid := false
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			if !invalid {
				b.WriteRune(utf8.RuneError)
			}
			invalid = true
			continue
		case r == 0:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
		invalid = false
	}
	clean := b.String()
	if len(clean) <= inbox.MaxStoredErrorBytes {
		return clean
	}
	const ellipsis = "…"
	var cut strings.Builder
	for _, r := range clean {
		if cut.Len()+utf8.RuneLen(r) > inbox.MaxStoredErrorBytes-len(ellipsis) {
			break
		}
		cut.WriteRune(r)
	}
	return cut.String() + ellipsis
}

// FuzzErrorText fails a lease-mode handler with a fuzzed error under a fuzzed session, set before the message or by
// the handler itself, just before the inbox stores the error: the row keeps the text as lease mode documents it,
// or the write is refused with ErrClientEncoding and the lease stays the holder's, and the probe table keeps its
// rows.
func (ps PostgresSecurity) FuzzErrorText(f *testing.F) {
	for n, text := range secSeeds() {
		enc := secSeedSessions[n%len(secSeedSessions)]
		f.Add(text, enc, uint8(0), true, false)
		f.Add(text, enc, uint8(0), false, true)
	}
	st := ps.stage(f, ps.DSN)
	var (
		seq  atomic.Int64
		fail error
	)
	h := st.inbox(f, inbox.WithLease(time.Hour)).Middleware(st.leased(func() error { return fail }))
	f.Fuzz(func(t *testing.T, raw string, encoding, quote uint8, conforming, inHandler bool) {
		text := strings.ReplaceAll(raw, probeMarker, st.probe)
		fail = errors.New(text)
		s := fuzzSession(encoding, quote, conforming)
		what := fmt.Sprintf("error %q under %s (set by the handler: %t)", text, s, inHandler)
		before := s
		st.switchTo = nil
		if inHandler {
			before, st.switchTo = s.inUTF8(), &s
		}
		defer func() { st.switchTo = nil }()
		id := fmt.Sprintf("err-%d", seq.Add(1))
		calls := st.calls.Load()
		pid := st.set(t, before)
		_, err := h(secMsg(id))
		require.Equal(t, pid, st.backend(t), "the inbox ran on the session the input set")
		st.requireProbeIntact(t, what)
		if !inHandler && st.refuses(s, id) {
			require.ErrorIs(t, err, inbox.ErrClientEncoding, what)
			require.Equal(t, calls, st.calls.Load(), "%s: the handler did not run", what)
			_, found := st.state(t, secConsumer, id)
			require.False(t, found, "%s: nothing is stored", what)
			return
		}
		require.Equal(t, calls+1, st.calls.Load(), what)
		require.ErrorIs(t, err, fail, "%s: the caller gets the handler's error", what)
		state, stored, null := st.lastError(t, id)
		if errors.Is(err, inbox.ErrClientEncoding) {
			require.True(t, st.refuses(s, text), "%s: the write was refused on a session it may write on", what)
			require.Equal(t, "processing", state, "%s: the lease stays the holder's until it ends", what)
			require.True(t, null, "%s: no error is stored", what)
			return
		}
		require.Equal(t, "released", state, "%s: %v", what, err)
		require.False(t, null, what)
		require.Equal(t, storedErrorText(text), stored, "%s: stored %q", what, stored)
	})
}

// lastError reads the state of secConsumer's row for id and its last_error as the database holds its bytes.
func (st *secStage) lastError(t testing.TB, id string) (state, text string, null bool) {
	t.Helper()
	var b []byte
	require.NoError(t, st.admin.QueryRow(`SELECT state, last_error IS NULL, convert_to(coalesce(last_error, ''),
		current_setting('server_encoding')) FROM `+st.Table+`_view WHERE consumer = $1 AND message_id = $2`, secConsumer, id).Scan(&state, &null, &b))
	return state, string(b), null
}
