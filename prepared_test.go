package inbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// inboxPrepared reports, for the one connection db may open, how many statements the inbox prepared on its session
// and how often they ran.
func inboxPrepared(t testing.TB, db *sql.DB) (statements, runs int) {
	t.Helper()
	require.Equal(t, 1, db.Stats().MaxOpenConnections, "the statements are those of one connection's session")
	require.NoError(t, db.QueryRow(`SELECT count(*), coalesce(sum(generic_plans + custom_plans), 0)
		FROM pg_prepared_statements WHERE name LIKE 'watermill\_inbox\_%'`).Scan(&statements, &runs))
	return statements, runs
}

// claimPrepared builds an inbox over one lib/pq connection whose handler credits account 1, counting its calls,
// and applies first through it, which prepares the claim on that connection's session.
func claimPrepared(t *testing.T, first string) (*testBundle, message.HandlerFunc, *atomic.Int64) {
	t.Helper()
	b := newBundle(t)
	b.db.SetMaxOpenConns(1)
	ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"), inbox.WithLogger(b.Logs))
	require.NoError(t, err)
	calls := &atomic.Int64{}
	h := ib.Middleware(b.Credit(1, calls))
	_, err = h(newMsg(first))
	require.NoError(t, err)
	statements, _ := inboxPrepared(t, b.db)
	require.Equal(t, 1, statements)
	return b, h, calls
}

// Over lib/pq the claim is prepared once on each connection's session and then run by name: the server neither
// parses nor plans it again.
func TestLibpq_TheClaimIsPreparedOnceOnEachConnection(t *testing.T) {
	b, h, calls := claimPrepared(t, "evt-0") // the first of the 12 below
	// The second round is all copies: their claims run the statement too.
	for round := range 2 {
		for n := range 12 {
			_, err := h(newMsg("evt-" + strconv.Itoa(n)))
			require.NoError(t, err, "round %d, message %d", round, n)
		}
	}
	statements, runs := inboxPrepared(t, b.db)
	require.Equal(t, 1, statements)
	require.Equal(t, 1+24, runs, "every claim ran the prepared statement")
	require.EqualValues(t, 12, calls.Load())
	require.Equal(t, 12, b.Balance(t))
}

// A session that lost the prepared claim (here the application deallocated it; behind a pooler in transaction mode
// the connection reached another session) costs the message nothing: its claim is made again with literals, before
// its handler runs, and the inbox prepares no more.
func TestLibpq_AClaimWhoseSessionLostItsStatementIsMadeAgainWithLiterals(t *testing.T) {
	b, h, calls := claimPrepared(t, "before")
	_, err := b.db.Exec(`DEALLOCATE ALL`)
	require.NoError(t, err)
	for n := range 5 {
		_, err := h(newMsg("after-" + strconv.Itoa(n)))
		require.NoError(t, err, "message %d", n)
	}
	_, err = h(newMsg("before"))
	require.NoError(t, err, "a copy")
	require.EqualValues(t, 6, calls.Load(), "each message's handler ran once")
	require.Equal(t, 6, b.Balance(t))
	require.Equal(t, 6, b.Rows(t, "wallet-credits"))
	statements, _ := inboxPrepared(t, b.db)
	require.Zero(t, statements, "the inbox prepares no more")
	require.Len(t, b.Logs.Find("Inbox stops preparing its claim"), 1)
}

// Behind pgbouncer in transaction mode a client connection's transactions reach whichever server session is free,
// and a claim prepared in one is missing from the next: every message is still applied once, none fails, and the
// inbox goes on with literals.
func TestPgbouncer_PreparedClaimsGiveWayToLiterals(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	proxied := openVia(t, "postgres", inboxtest.StartPgbouncer(t, testDSN(), "postgres"))
	proxied.SetMaxOpenConns(2 * inboxtest.PgbouncerPoolSize)
	ib, err := inbox.New(proxied, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"), inbox.WithLogger(b.Logs))
	require.NoError(t, err)
	var calls atomic.Int64
	effect := `UPDATE ` + b.Accounts + ` SET balance = balance + $1 WHERE id = 1`
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), effect, 1)
		return nil, err
	})
	const workers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				id := "evt-" + strconv.Itoa(w) + "-" + strconv.Itoa(n)
				for range 2 { // and a copy
					if _, err := h(newMsg(id)); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, workers*each, calls.Load(), "each message's handler ran once, and no copy's")
	require.Equal(t, workers*each, b.Balance(t))
	require.Equal(t, workers*each, b.Rows(t, "wallet-credits"))
	require.NotEmpty(t, b.Logs.Find("Inbox stops preparing its claim"), "a session lacked the claim")
	var left int
	require.NoError(t, b.db.QueryRowContext(context.Background(), `SELECT count(*) FROM `+b.Table+`_view`).Scan(&left))
	require.Equal(t, workers*each, left)
}

// A claim prepared while message_id was text no longer fits once the column has become uuid (a table altered, or
// dropped and created again, under running consumers): the claim is made again with literals, which fit.
func TestLibpq_AClaimPreparedBeforeItsTableChangedIsMadeAgainWithLiterals(t *testing.T) {
	b, h, calls := claimPrepared(t, "0195f3a0-0000-7000-8000-000000000001")
	_, err := b.db.Exec(`DROP VIEW ` + b.Table + `_view`) // it would keep the column's type as it was
	require.NoError(t, err)
	for _, table := range []string{b.Table, b.Table + "_produced"} {
		_, err = b.db.Exec(`ALTER TABLE ` + table + ` ALTER COLUMN message_id TYPE uuid USING message_id::uuid`)
		require.NoError(t, err)
	}
	_, err = h(newMsg("0195f3a0-0000-7000-8000-000000000002"))
	require.NoError(t, err)
	_, err = h(newMsg("0195f3a0-0000-7000-8000-000000000001"))
	require.NoError(t, err, "a copy")
	require.EqualValues(t, 2, calls.Load())
	require.Equal(t, 2, b.Balance(t))
	require.Len(t, b.Logs.Find("Inbox stops preparing its claim"), 1)
}

// Lease mode's claim and its completion each open a short transaction of their own: over lib/pq each is prepared
// once on the connection and run by name, and a session that lost them costs a message nothing.
func TestLibpq_LeaseModesClaimAndCompletionArePreparedOnceAndGiveWayToLiterals(t *testing.T) {
	b := newBundle(t)
	b.db.SetMaxOpenConns(1)
	ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("payments"), inbox.WithLease(time.Minute))
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return nil, nil
	})
	for round := range 2 { // the second round is all copies: their claims run the statement too
		for n := range 5 {
			_, err := h(newMsg("pay-" + strconv.Itoa(n)))
			require.NoError(t, err, "round %d, message %d", round, n)
		}
	}
	statements, runs := inboxPrepared(t, b.db)
	require.Equal(t, 2, statements, "the claim and the completion")
	require.Equal(t, 10+5, runs, "every claim, and every completion")

	_, err = b.db.Exec(`DEALLOCATE ALL`)
	require.NoError(t, err)
	for n := range 5 {
		_, err := h(newMsg("after-" + strconv.Itoa(n)))
		require.NoError(t, err, "message %d", n)
	}
	require.EqualValues(t, 10, calls.Load(), "each message's call ran once")
	statements, _ = inboxPrepared(t, b.db)
	require.Zero(t, statements, "the inbox prepares no more")
	var done int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+b.Table+`_view WHERE consumer = 'payments' AND state = 'done'`).Scan(&done))
	require.Equal(t, 10, done)
}

// A connection's first claim prepares the statement in the round trip that runs it: a pool that opens connections
// often (database/sql keeps two idle by default) pays no round trip for the preparing.
func TestLibpq_AConnectionsFirstClaimCostsNoRoundTripMore(t *testing.T) {
	var counted trips
	db := openCountedDB(t, &counted)
	db.SetMaxIdleConns(0) // each transaction on a connection of its own, closed after it
	b := newBundle(t)
	ib, err := inbox.New(db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"))
	require.NoError(t, err)
	calls := &atomic.Int64{}
	h := ib.Middleware(b.Credit(1, calls))
	_, err = h(newMsg("warm-up")) // the schema check and the consumer's registration happen once
	require.NoError(t, err)

	counted.n.Store(0)
	require.NoError(t, db.Ping())
	dial := counted.n.Load() - 1 // the ping's own
	for n := range 5 {
		counted.n.Store(0)
		_, err := h(newMsg("evt-" + strconv.Itoa(n)))
		require.NoError(t, err)
		require.Equal(t, dial+5, counted.n.Load(), "message %d: dialling, then BEGIN, the claim, the handler's UPDATE in two, COMMIT", n)
	}
	require.EqualValues(t, 6, calls.Load())
	require.Equal(t, 6, b.Balance(t))

	// A copy on a fresh connection prepares the claim too, and its lack of a row proves it prepared.
	counted.n.Store(0)
	_, err = h(newMsg("evt-0"))
	require.NoError(t, err)
	require.EqualValues(t, 6, calls.Load(), "a copy is skipped")
	require.Equal(t, dial+4, counted.n.Load(), "dialling, then BEGIN, the claim, reading the row, ROLLBACK")
}
