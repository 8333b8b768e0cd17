package inbox_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// Over lib/pq the inbox's own statements go with bind parameters, never with values in their text, and lib/pq
// spends two round trips on a statement with parameters: the server parses and describes it, then binds and runs
// it. The handler's statement below has no arguments (one round trip), so the count shows what the inbox's own
// statements cost.
func TestLibpq_TheInboxsStatementsGoWithParametersInTwoRoundTripsEach(t *testing.T) {
	var counted trips
	db := openCountedDB(t, &counted)
	b := newBundle(t)
	ib, err := inbox.New(db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"))
	require.NoError(t, err)
	effect := `UPDATE ` + b.Accounts + ` SET balance = balance + 1 WHERE id = 1`
	credit := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), effect)
		return nil, err
	})
	creditAndTell := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := inbox.TxFromContext(msg.Context())
		if _, err := tx.ExecContext(msg.Context(), effect); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage("credited-"+msg.UUID, []byte(`{"it's":"done\\"}`))}, nil
	})
	_, err = credit(newMsg("warm-up")) // the schema check and the consumer's registration happen once
	require.NoError(t, err)

	perMessage := func(h message.HandlerFunc, ids ...string) float64 {
		t.Helper()
		counted.n.Store(0)
		for _, id := range ids {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		return float64(counted.n.Load()) / float64(len(ids))
	}
	const n = 20
	ids := make([]string, n)
	for k := range ids {
		ids[k] = "evt-" + strconv.Itoa(k)
	}
	require.Equal(t, 5.0, perMessage(credit, ids...), "BEGIN, the claim in two, the handler's UPDATE, COMMIT")
	require.Equal(t, 6.0, perMessage(credit, ids...), "a copy: BEGIN, the claim in two, reading the row in two, ROLLBACK")
	for k := range ids {
		ids[k] = "told-" + strconv.Itoa(k)
	}
	require.Equal(t, 7.0, perMessage(creditAndTell, ids...), "BEGIN, the claim in two, the UPDATE, storing what it produced in two, COMMIT")
	require.Equal(t, 6.0, perMessage(creditAndTell, ids...), "a copy, with its produced message read along")
	require.Equal(t, 2*n+1, b.Balance(t))
}

// The IDs below look like SQL: each must reach the table exactly as it came, be applied once, and be found again by
// its copy.
func TestLibpq_OddIDsAreStoredAsTheyCame(t *testing.T) {
	ids := []string{
		`it's`, `back\slash`, `\`, `'`, `''`, `\'; DROP TABLE accounts; --`, `$1`, `$2$1`, `E'x'`, `"char"`,
		`-- a comment`, `/* not a comment */`, `$$dollar$$`, "tab\tand\nnewline", `ünïcødé 🚀`, `%s %d ?`,
	}
	ib, b := setup(t)
	var calls atomic.Int64
	h := ib.Middleware(b.Credit(1, &calls))
	for _, id := range ids {
		_, err := h(newMsg(id))
		require.NoError(t, err, "%q", id)
		_, err = h(newMsg(id))
		require.NoError(t, err, "a copy of %q", id)
	}
	require.EqualValues(t, len(ids), calls.Load())
	require.Equal(t, len(ids), b.Balance(t))
	for _, id := range ids {
		var n int
		require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+b.Table+`_view WHERE message_id = $1`, id).Scan(&n))
		require.Equal(t, 1, n, "%q is stored as it came", id)
	}
	require.Equal(t, len(ids), b.Rows(t, "wallet-credits"))
}

// On a uuid table an ID that is no UUID is refused by the database, written as a literal or not: the message is
// rejected as having an invalid ID, whatever quotes it holds, and nothing is applied.
func TestLibpq_ANonUUIDOnAUUIDTableIsAnInvalidID(t *testing.T) {
	b := newBundle(t)
	table := b.Table + "_u"
	ctx := context.Background()
	require.NoError(t, inbox.OnSQL(b.db).Migrate(ctx, inbox.WithTable(table), inbox.WithIDType(inbox.IDTypeUUID)))
	t.Cleanup(func() { dropInboxTables(b.db, table) })
	ib, err := inbox.New(b.db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"),
		inbox.WithIDType(inbox.IDTypeUUID), inbox.WithRejectDelay(time.Millisecond))
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(b.Credit(1, &calls))
	for _, id := range []string{`0190b9a4-7c1e-7000-8000-00000000000'`, `x'::uuid, '0190b9a4-7c1e-7000-8000-000000000001`} {
		_, err := h(newMsg(id))
		require.ErrorIs(t, err, inbox.ErrInvalidEventID, "%q", id)
	}
	id := "0190b9a4-7c1e-7000-8000-000000000001"
	for range 2 {
		_, err := h(newMsg(id))
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, calls.Load())
	var stored string
	require.NoError(t, b.db.QueryRow(`SELECT message_id::text FROM `+table).Scan(&stored))
	require.Equal(t, id, stored)
}

// Lease mode's statements go the same way, its claim included, whose INSERT ... SELECT must still give the literal
// ID the column's type on a uuid table.
func TestLibpq_LeaseModeOnAUUIDTable(t *testing.T) {
	b := newBundle(t)
	table := b.Table + "_l"
	require.NoError(t, inbox.OnSQL(b.db).Migrate(context.Background(), inbox.WithTable(table), inbox.WithIDType(inbox.IDTypeUUID)))
	t.Cleanup(func() { dropInboxTables(b.db, table) })
	ib, err := inbox.New(b.db, inbox.WithTable(table), inbox.WithConsumer("payments"), inbox.WithIDType(inbox.IDTypeUUID),
		inbox.WithLease(time.Minute))
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return []*message.Message{message.NewMessage("receipt", []byte(`{"note":"it's paid \\o/"}`))}, nil
	})
	id := "0190b9a4-7c1e-7000-8000-0000000000aa"
	first, err := h(newMsg(id))
	require.NoError(t, err)
	again, err := h(newMsg(id))
	require.NoError(t, err)
	require.EqualValues(t, 1, calls.Load())
	require.Len(t, again, 1)
	require.Equal(t, first[0].UUID, again[0].UUID)
	require.Equal(t, string(first[0].Payload), string(again[0].Payload))
	var state string
	require.NoError(t, b.db.QueryRow(`SELECT state FROM `+table+`_view WHERE message_id = $1`, id).Scan(&state))
	require.Equal(t, "done", state)
}
