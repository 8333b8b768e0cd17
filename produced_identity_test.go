package inbox_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// produceTwo is a handler that credits account 1 (in transaction mode) and returns two messages with fresh random
// UUIDs, as handlers usually build them.
func (b *testBundle) produceTwo(calls *atomic.Int64) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		if _, ok := inbox.LeaseFromContext(msg.Context()); !ok {
			if _, err := b.Credit(100, nil)(msg); err != nil {
				return nil, err
			}
		}
		first := message.NewMessage(watermill.NewUUID(), []byte("credited"))
		first.Metadata.Set("account_id", "1")
		second := message.NewMessage(watermill.NewUUID(), []byte("receipt"))
		return []*message.Message{first, second}, nil
	}
}

func TestProducedMessages_GetTheSameIdentityEveryTimeTheirMessageIsApplied(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string][]inbox.Option{"TransactionMode": nil, "LeaseMode": {inbox.WithLease(time.Minute)}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Two inbox tables stand for two runs of one handler on one message whose first run was forgotten (a
			// lost commit, a restored backup): each run produces the same messages under the same identities.
			var runs [2][]*message.Message
			for r := range runs {
				ib, b := setup(t, mode...)
				var calls atomic.Int64
				out, err := ib.Middleware(b.produceTwo(&calls))(newMsg("evt-1"))
				require.NoError(t, err)
				require.EqualValues(t, 1, calls.Load())
				runs[r] = out
			}
			require.Len(t, runs[0], 2)
			require.Len(t, runs[1], 2)
			for i := range runs[0] {
				want := inbox.ProducedMessageUUID("wallet-credits", "evt-1", i)
				require.Equal(t, want, runs[0][i].UUID)
				require.Equal(t, want, runs[1][i].UUID)
				require.Equal(t, want, runs[1][i].Metadata.Get(inbox.DefaultIDMetadataKey))
			}
			require.NotEqual(t, runs[0][0].UUID, runs[0][1].UUID, "each position has its own identity")
		})
	}
}

func TestProducedMessageUUID_DiffersForEveryConsumerEventAndPosition(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	for _, c := range []struct {
		consumer, id string
		pos          int
	}{
		{"payments", "eu:42", 0}, {"payments:eu", "42", 0}, {"payments", "eu", 0}, {"paymentseu", "", 0},
		{"payments", "eu:42", 1}, {"payments", "eu:421", 0}, {"payments", "eu:4", 21}, {"a", "b", 0}, {"ab", "", 0},
	} {
		u := inbox.ProducedMessageUUID(c.consumer, c.id, c.pos)
		key := c.consumer + "|" + c.id + "|" + string(rune('0'+c.pos))
		require.NotContains(t, seen, u, "%s collides with %s", key, seen[u])
		seen[u] = key
		require.Equal(t, u, inbox.ProducedMessageUUID(c.consumer, c.id, c.pos), "stable")
	}
	// Pinned: downstream consumers may store these identities, so the derivation must never change.
	require.Equal(t, "78a8ab17-694c-5741-94c2-bcca17fbe910", inbox.ProducedMessageUUID("wallet-credits", "evt-1", 0))
}

func TestProducedMessages_HandlerSetEventIDIsKept(t *testing.T) {
	t.Parallel()
	ib, _ := setup(t)
	out, err := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		m := message.NewMessage(watermill.NewUUID(), nil)
		m.Metadata.Set(inbox.DefaultIDMetadataKey, "order-7-shipped")
		return []*message.Message{m}, nil
	})(newMsg("evt-1"))
	require.NoError(t, err)
	require.Equal(t, "order-7-shipped", out[0].Metadata.Get(inbox.DefaultIDMetadataKey))
	require.Equal(t, inbox.ProducedMessageUUID("wallet-credits", "evt-1", 0), out[0].UUID)
}

func TestProducedMessages_KeepAnyBytesWatermillAllows(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string][]inbox.Option{"TransactionMode": nil, "LeaseMode": {inbox.WithLease(time.Minute)}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ib, _ := setup(t, mode...)
			var calls atomic.Int64
			h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				calls.Add(1)
				m := message.NewMessage(watermill.NewUUID(), []byte{0x00, 0xff, 0xfe, 'x'})
				m.Metadata.Set("nul", "a\x00b")
				m.Metadata.Set("cut", "caf\xc3")
				m.Metadata.Set("key\x00\xff", "plain")
				m.Metadata.Set("unicode", "ünïcödé ✓")
				return []*message.Message{m}, nil
			})
			first, err := h(newMsg("evt-1"))
			require.NoError(t, err, "a produced message with any bytes is stored")
			again, err := h(newMsg("evt-1"))
			require.NoError(t, err)
			require.EqualValues(t, 1, calls.Load(), "the handler runs once, never in a loop")
			require.Len(t, again, 1)
			require.Equal(t, first[0].UUID, again[0].UUID)
			require.Equal(t, first[0].Payload, again[0].Payload)
			require.Equal(t, first[0].Metadata, again[0].Metadata)
		})
	}
}

func TestProducedMessages_ReplayedWithTheShapeTheyHad(t *testing.T) {
	t.Parallel()
	// With the message UUID as the ID and no event ID key, nothing is stamped: the produced message's metadata
	// stays empty, and a replay must still hand the router a usable (non-nil) map.
	ib, _ := setup(t, inbox.WithMessageUUIDAsID(), inbox.WithIDMetadataKey(""))
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte{})}, nil
	})
	in := newMsg("")
	in.UUID = "0b8e6f0e-6a53-4b0e-8d0e-2f4f2d1e0a01"
	first, err := h(in)
	require.NoError(t, err)
	again, err := h(in.Copy())
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.NotNil(t, again[0].Metadata, "Watermill's middlewares write to a replayed message's metadata")
	require.Equal(t, first[0].Metadata, again[0].Metadata)
	require.Equal(t, first[0].Payload, again[0].Payload)
	again[0].Metadata.Set("correlation_id", "x") // what the CorrelationID middleware does; must not panic
}

func TestProducedMessages_ThatTheDatabaseRefusesAreDeadLetteredNotRetriedInALoop(t *testing.T) {
	t.Parallel()
	dlq := &testkit.RecordingPublisher{}
	ib, b := setup(t, inbox.WithDeadLetter(dlq, "deposits.dlq"))
	// A limit of the operator's stands for any value the column refuses.
	_, err := b.db.Exec(`ALTER TABLE ` + b.Table + `_produced ADD CONSTRAINT small CHECK (length(produced::text) < 200)`)
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		if _, err := b.Credit(100, nil)(msg); err != nil {
			return nil, err
		}
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(strings.Repeat("x", 500)))}, nil
	})
	_, err = h(newMsg("evt-1"))
	require.NoError(t, err, "dead-lettered, then acked")
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, 0, b.Balance(t), "the effect is rolled back with the claim")
	require.Equal(t, 0, b.Rows(t, "wallet-credits"))
	dead := dlq.Messages("deposits.dlq")
	require.Len(t, dead, 1)
	require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "produced")
}

func TestProducedMessages_ThatTheDatabaseRefusesInLeaseModeAreDeadLetteredOnce(t *testing.T) {
	t.Parallel()
	dlq := &testkit.RecordingPublisher{}
	ib, b := setup(t, inbox.WithLease(time.Minute), inbox.WithDeadLetter(dlq, "payments.dlq"))
	_, err := b.db.Exec(`ALTER TABLE ` + b.Table + `_produced ADD CONSTRAINT small CHECK (length(produced::text) < 200)`)
	require.NoError(t, err)
	var calls atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		calls.Add(1)
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte(strings.Repeat("x", 500)))}, nil
	})
	for range 3 {
		_, err = h(newMsg("pay-1"))
		require.NoError(t, err, "dead-lettered, then acked; later copies are acked without running")
	}
	require.EqualValues(t, 1, calls.Load(), "the provider is called once, not once per copy")
	require.Equal(t, "failed", b.stateOf(t, "wallet-credits", "pay-1"))
	dead := dlq.Messages("payments.dlq")
	require.Len(t, dead, 1)
	require.Contains(t, dead[0].Metadata.Get(middleware.ReasonForPoisonedKey), "produced")
}
