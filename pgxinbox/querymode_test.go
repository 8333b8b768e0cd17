package pgxinbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// queryExecModes are pgx's ways of sending a statement, each of which types the inbox's parameters its own way:
// by the server's description of the statement (the first three), or by the Go type of each argument (the last
// two, with text parameters; simple_protocol interpolates them into the statement).
var queryExecModes = map[string]pgx.QueryExecMode{
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

func TestEveryQueryExecModeRunsEveryStatementOfTheInbox(t *testing.T) {
	t.Parallel()
	for name, mode := range queryExecModes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pool := openPoolIn(t, testDSN(), mode)
			exerciseEveryStatement(t, pool)
		})
	}
}

// exerciseEveryStatement runs, over pool, each statement the inbox sends: the schema check and creation, both
// modes' claims, duplicates with produced messages, lease writes, dead letters and the operations.
func exerciseEveryStatement(t *testing.T, pool pgxinbox.Beginner) {
	t.Helper()
	ctx := context.Background()
	b := newEmptyBundle(t) // the test's own reads and writes, in pgx's default mode
	db := pgxinbox.Database(pool)

	// Transaction mode, creating the tables on its first message, and a duplicate replaying produced messages.
	ib, err := db.New(b.Options()...)
	require.NoError(t, err)
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if _, err := b.Credit(100, nil)(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(`{"credited":100}`))}, nil
	})
	_, err = h(newMsg("evt-1"))
	require.NoError(t, err)
	again, err := h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, inbox.ProducedMessageUUID("wallet-credits", "evt-1", 0), again[0].UUID)
	require.Equal(t, 100, b.Balance(t))

	// Lease mode: a failed attempt released, the next one done with its produced message, a duplicate.
	leased, err := db.New(b.Options(inbox.WithConsumer("payments"), inbox.WithLease(10*time.Second))...)
	require.NoError(t, err)
	lh := leased.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		l, _ := inbox.LeaseFromContext(msg.Context())
		if err := l.Extend(msg.Context(), 15*time.Second); err != nil {
			return nil, err
		}
		if l.Attempt() == 1 {
			return nil, errors.New("provider unavailable")
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("charged"))}, nil
	})
	_, err = lh(newMsg("pay-1"))
	require.ErrorContains(t, err, "provider unavailable")
	_, err = lh(newMsg("pay-1"))
	require.NoError(t, err)
	again, err = lh(newMsg("pay-1"))
	require.NoError(t, err)
	require.Len(t, again, 1)
	state, attempts := b.Row(t, "payments", "pay-1")
	require.Equal(t, "done", state)
	require.Equal(t, 2, attempts)

	// A message without an event ID, dead-lettered.
	dlq := &recordingPublisher{}
	parking, err := db.New(b.Options(inbox.WithDeadLetter(dlq, "dlq"))...)
	require.NoError(t, err)
	_, err = parking.Middleware(b.Credit(100, nil))(newMsg(""))
	require.NoError(t, err)
	require.Len(t, dlq.Messages("dlq"), 1)

	// A table of uuid event IDs.
	uuidTable := inbox.WithTable(b.Table + "_u")
	t.Cleanup(func() {
		for _, q := range inboxtest.PostgreSQL.DropInbox(b.Table + "_u") {
			_, _ = b.pool.Exec(ctx, q)
		}
	})
	require.NoError(t, db.Migrate(ctx, uuidTable, inbox.WithIDType(inbox.IDTypeUUID)))
	byUUID, err := db.New(inbox.WithConsumer("wallet-credits"), uuidTable)
	require.NoError(t, err)
	id := uuid.NewString()
	for range 2 {
		_, err = byUUID.Middleware(b.Credit(100, nil))(newMsg(id))
		require.NoError(t, err)
	}
	require.Equal(t, 200, b.Balance(t))
	_, err = db.Forget(ctx, inbox.ForgetParams{Consumer: "wallet-credits", ID: id}, uuidTable)
	require.NoError(t, err)

	// The operations.
	_, err = b.pool.Exec(ctx, `UPDATE `+b.Table+` SET processed_at = `+inboxtest.PostgreSQL.ProcessedAgo(40*24*time.Hour)+`
		WHERE consumer_id = (SELECT id FROM `+b.Table+`_consumers WHERE name = 'payments')`)
	require.NoError(t, err)
	ms, err := db.Remembers(ctx, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Len(t, ms, 2)
	st, err := db.ReadStats(ctx, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Len(t, st.Consumers, 2)
	res, err := db.Cleanup(ctx, inbox.CleanupParams{Retention: 30 * 24 * time.Hour}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Deleted)
	row, err := db.Forget(ctx, inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-1", Force: true}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.True(t, row.HadProduced)
	require.Equal(t, 0, b.Rows(t, "wallet-credits"))
}
