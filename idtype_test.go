package inbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// uuidBundle is a bundle whose inbox table was created with a uuid message_id.
func uuidBundle(t *testing.T) *testBundle {
	t.Helper()
	b := newBundle(t) // a text table, replaced below by a uuid one of the same name
	_, err := b.db.Exec(`DROP TABLE ` + b.Table + `, ` + b.Table + `_produced, ` + b.Table + `_migrations, ` +
		b.Table + `_consumers, ` + b.Table + `_locks CASCADE`) // CASCADE: the view goes with the table
	require.NoError(t, err)
	require.NoError(t, inbox.OnSQL(b.db).Migrate(context.Background(), inbox.WithTable(b.Table), inbox.WithIDType(inbox.IDTypeUUID)))
	return b
}

func TestIDTypeUUID(t *testing.T) {
	t.Parallel()

	t.Run("MigrateCreatesAUUIDColumn", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		var dataType string
		require.NoError(t, b.db.QueryRow(`SELECT data_type FROM information_schema.columns
			WHERE table_name = $1 AND column_name = 'message_id'`, b.Table).Scan(&dataType))
		require.Equal(t, "uuid", dataType)

		ms, err := inbox.OnSQL(nil).Migrations(inbox.WithIDType(inbox.IDTypeUUID))
		require.NoError(t, err)
		require.True(t, strings.Contains(ms[0].Up, "message_id   uuid"), "the SQL for users' own tools says uuid too")
	})

	t.Run("DeduplicatesOneUUIDWhateverItsSpelling", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"), inbox.WithIDType(inbox.IDTypeUUID))
		require.NoError(t, err)
		var calls atomic.Int64
		h := ib.Middleware(b.Credit(100, &calls))
		for _, id := range []string{
			"0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a",
			"0193A6F2-7C1E-7D3A-9B2C-1F2E3D4C5B6A",
			"urn:uuid:0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a",
		} {
			_, err := h(newMsg(id))
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, calls.Load())
		require.Equal(t, 100, b.Balance(t))
	})

	t.Run("ANonUUIDIDIsDeadLetteredNotRetried", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		dlq := &testkit.RecordingPublisher{}
		ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"),
			inbox.WithIDType(inbox.IDTypeUUID), inbox.WithDeadLetter(dlq, "dlq"))
		require.NoError(t, err)
		var calls atomic.Int64
		_, err = ib.Middleware(b.Credit(100, &calls))(newMsg("evt-1"))
		require.NoError(t, err)
		require.Zero(t, calls.Load())
		require.Len(t, dlq.Messages("dlq"), 1)
		require.Contains(t, dlq.Messages("dlq")[0].Metadata.Get(middleware.ReasonForPoisonedKey), `"evt-1" is not a UUID`)
	})

	t.Run("AnIDTheColumnRefusesIsDeadLetteredEvenWhenTheOptionIsMissing", func(t *testing.T) {
		t.Parallel()
		// The table is uuid but this consumer was configured without WithIDType: PostgreSQL refuses "evt-1".
		for name, mode := range map[string][]inbox.Option{"Transaction": nil, "Lease": {inbox.WithLease(time.Minute)}} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				b := uuidBundle(t)
				dlq := &testkit.RecordingPublisher{}
				opts := append([]inbox.Option{inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"), inbox.WithDeadLetter(dlq, "dlq")}, mode...)
				ib, err := inbox.New(b.db, opts...)
				require.NoError(t, err)
				var calls atomic.Int64
				_, err = ib.Middleware(b.Credit(100, &calls))(newMsg("evt-1"))
				require.NoError(t, err, "dead-lettered and acked, not nacked forever")
				require.Zero(t, calls.Load())
				require.Len(t, dlq.Messages("dlq"), 1)
				require.Contains(t, dlq.Messages("dlq")[0].Metadata.Get(middleware.ReasonForPoisonedKey), `"evt-1" is not a UUID`,
					"the inbox learned the column's type and refused the ID before sending it")
			})
		}
	})

	t.Run("WithoutTheOptionEveryLetterCaseOfAUUIDGetsTheSameIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("payments"), inbox.WithLease(time.Minute))
		require.NoError(t, err)
		var keys, ids []string
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			l, ok := inbox.LeaseFromContext(msg.Context())
			require.True(t, ok)
			id, _ := inbox.EventIDFromContext(msg.Context())
			keys, ids = append(keys, l.IdempotencyKey()), append(ids, id)
			if len(keys) == 1 {
				return nil, errors.New("provider timed out") // the first copy fails after the call went out
			}
			return nil, nil
		})
		_, err = h(newMsg("0193A6F2-7C1E-7D3A-9B2C-1F2E3D4C5B6A"))
		require.Error(t, err)
		_, err = h(newMsg("0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a"))
		require.NoError(t, err)
		want := inbox.IdempotencyKey("payments", "0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a")
		require.Equal(t, []string{want, want}, keys, "the provider sees one key, so it charges once")
		require.Equal(t, []string{"0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a", "0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a"}, ids)
	})

	t.Run("WithoutTheOptionTheHandlerSeesTheIDAsTheTableStoresIt", func(t *testing.T) {
		t.Parallel()
		b := uuidBundle(t)
		ib, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"))
		require.NoError(t, err)
		var seen string
		_, err = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			seen, _ = inbox.EventIDFromContext(msg.Context())
			return nil, nil
		})(newMsg("{0193A6F2-7C1E-7D3A-9B2C-1F2E3D4C5B6A}"))
		require.NoError(t, err)
		var stored string
		require.NoError(t, b.db.QueryRow(`SELECT message_id::text FROM `+b.Table).Scan(&stored))
		require.Equal(t, stored, seen)
	})

	t.Run("AnExplicitIDTypeThatDisagreesWithTheTableIsAConfigurationError", func(t *testing.T) {
		t.Parallel()
		uuids := uuidBundle(t)
		texts := newBundle(t)
		for name, tc := range map[string]struct {
			b      *testBundle
			idType inbox.IDType
		}{"TextForAUUIDTable": {uuids, inbox.IDTypeText}, "UUIDForATextTable": {texts, inbox.IDTypeUUID}} {
			t.Run(name, func(t *testing.T) {
				dlq := &testkit.RecordingPublisher{}
				const delay = 50 * time.Millisecond
				ib, err := inbox.New(tc.b.db, inbox.WithTable(tc.b.Table), inbox.WithConsumer("wallet-credits"),
					inbox.WithIDType(tc.idType), inbox.WithDeadLetter(dlq, "dlq"), inbox.WithRejectDelay(delay))
				require.NoError(t, err, "New does not touch the database")
				var calls atomic.Int64
				start := time.Now()
				_, err = ib.Middleware(tc.b.Credit(100, &calls))(newMsg("0193a6f2-7c1e-7d3a-9b2c-1f2e3d4c5b6a"))
				require.ErrorIs(t, err, inbox.ErrInvalidOption)
				require.ErrorContains(t, err, "WithIDType")
				require.GreaterOrEqual(t, time.Since(start), delay, "a redelivery waits: no hot loop")
				require.Zero(t, calls.Load())
				require.Empty(t, dlq.Messages("dlq"), "the message is fine; the configuration is not")
			})
		}
	})

	t.Run("AnUnknownIDTypeIsAnInvalidOption", func(t *testing.T) {
		t.Parallel()
		_, err := inbox.New(openDB(t), inbox.WithIDType("bigint"))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
}
