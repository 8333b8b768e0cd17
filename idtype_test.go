package inbox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
)

// uuidBundle is a bundle whose inbox table was created with a uuid message_id.
func uuidBundle(t *testing.T) *testBundle {
	t.Helper()
	b := newBundle(t) // a text table, replaced below by a uuid one of the same name
	_, err := b.db.Exec(`DROP TABLE ` + b.table + `, ` + b.table + `_produced, ` + b.table + `_migrations`)
	require.NoError(t, err)
	require.NoError(t, inbox.Migrate(context.Background(), b.db, inbox.WithTable(b.table), inbox.WithIDType(inbox.IDTypeUUID)))
	return b
}

func TestIDTypeUUID(t *testing.T) {
	t.Parallel()

	t.Run("MigrateCreatesAUUIDColumn", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		var dataType string
		require.NoError(t, b.db.QueryRow(`SELECT data_type FROM information_schema.columns
			WHERE table_name = $1 AND column_name = 'message_id'`, b.table).Scan(&dataType))
		require.Equal(t, "uuid", dataType)

		ms, err := inbox.Migrations(inbox.WithIDType(inbox.IDTypeUUID))
		require.NoError(t, err)
		require.True(t, strings.Contains(ms[0].Up, "message_id   uuid"), "the SQL for users' own tools says uuid too")
	})

	t.Run("DeduplicatesOneUUIDWhateverItsSpelling", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		ib, err := inbox.New(b.db, inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"), inbox.WithIDType(inbox.IDTypeUUID))
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(b.credit(100, &calls))
		for _, id := range []string{
			"0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a",
			"0193A6F2-7C1E-7D3A-9B2C-1F2E3D4C5B6A",
			"urn:uuid:0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a",
		} {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, 100, b.balance(t))
	})

	t.Run("ANonUUIDIDIsDeadLetteredNotRetried", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		dlq := &recordingPublisher{}
		ib, err := inbox.New(b.db, inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"),
			inbox.WithIDType(inbox.IDTypeUUID), inbox.WithDeadLetter(dlq, "dlq"))
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = ib.Middleware(b.credit(100, &calls))(newMsg("evt-1"))
		require.NoError(t, err)
		require.Zero(t, calls.Load())
		require.Len(t, dlq.messages("dlq"), 1)
		require.Contains(t, dlq.messages("dlq")[0].Metadata.Get(inbox.ReasonKey), `"evt-1" is not a UUID`)
	})

	t.Run("AnIDTheColumnRefusesIsDeadLetteredEvenWhenTheOptionIsMissing", func(t *testing.T) {
		t.Parallel()
		// The table is uuid but this consumer was configured without WithIDType: PostgreSQL refuses "evt-1".
		for name, mode := range map[string][]inbox.Option{"Transaction": nil, "Lease": {inbox.WithLease(time.Minute)}} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := uuidBundle(t)
				dlq := &recordingPublisher{}
				opts := append([]inbox.Option{inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"), inbox.WithDeadLetter(dlq, "dlq")}, mode...)
				ib, err := inbox.New(b.db, opts...)
				require.NoError(t, err)
				var calls atomic.Int64
				_, err = ib.Middleware(b.credit(100, &calls))(newMsg("evt-1"))
				require.NoError(t, err, "dead-lettered and acked, not nacked forever")
				require.Zero(t, calls.Load())
				require.Len(t, dlq.messages("dlq"), 1)
				require.Contains(t, dlq.messages("dlq")[0].Metadata.Get(inbox.ReasonKey), "the database refused it")
			})
		}
	})

	t.Run("AnUnknownIDTypeIsAnInvalidOption", func(t *testing.T) {
		t.Parallel()
		_, err := inbox.New(openDB(t), inbox.WithIDType("bigint"))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
}
