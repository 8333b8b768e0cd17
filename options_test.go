package inbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestOptions_MisuseIsAnErrorAtConstruction(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	cases := map[string][]inbox.Option{
		"ANilOption":                     {inbox.WithTable("billing_inbox"), nil},
		"MaxAttemptsOfZeroGivenOutright": {inbox.WithLease(time.Second), inbox.WithMaxAttempts(0)},
		"AnEmptyConsumerGivenOutright":   {inbox.WithConsumer("")},
		"AConsumerWithANULByte":          {inbox.WithConsumer("wallet\x00credits")},
		"AConsumerThatIsNotUTF8":         {inbox.WithConsumer("wallet\xffcredits")},
		"AConsumerPastTheLimit":          {inbox.WithConsumer(strings.Repeat("c", inbox.MaxConsumerLength+1))},
		"BatchConcurrencyWithoutBatch":   {inbox.WithBatchConcurrency(2)},
		"FingerprintsWithClaimAtCommit":  {inbox.WithFingerprint(inbox.Fingerprint{}), inbox.WithClaimAtCommit()},
		"ConflictsDeadLetteredNowhere":   {inbox.WithFingerprint(inbox.Fingerprint{DeadLetter: true})},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { _, err = inbox.New(db, opts...) })
			require.ErrorIs(t, err, inbox.ErrInvalidOption)

			var recovered any
			func() {
				defer func() { recovered = recover() }()
				inbox.Middleware(db, opts...)
			}()
			panicked, ok := recovered.(error)
			require.True(t, ok, "Middleware panics with the error New returns, not with %v", recovered)
			require.ErrorIs(t, panicked, inbox.ErrInvalidOption)
		})
	}
	_, err := inbox.New(db, cases["FingerprintsWithClaimAtCommit"]...)
	require.ErrorContains(t, err, "a fingerprint is stored with the claim")
	_, err = inbox.New(db, cases["ConflictsDeadLetteredNowhere"]...)
	require.ErrorContains(t, err, "Fingerprint.DeadLetter needs WithDeadLetter")
}

// incompressible returns n random printable bytes: PostgreSQL cannot compress them to make them fit an index.
func incompressible(t *testing.T, n int) string {
	t.Helper()
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:"
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func TestOptions_TheLongestConsumerAndTheLongestIDFitTheIndexTogether(t *testing.T) {
	t.Parallel()
	consumer := incompressible(t, inbox.MaxConsumerLength)
	for name, mode := range map[string][]inbox.Option{"Transaction": nil, "Lease": {inbox.WithLease(time.Minute)}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ib, b := setup(t, append([]inbox.Option{inbox.WithConsumer(consumer), inbox.WithMaxIDLength(2000)}, mode...)...)
			_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
				return []*message.Message{message.NewMessage("out-1", nil)}, nil
			})(newMsg(incompressible(t, 2000)))
			require.NoError(t, err)
			require.Equal(t, 1, b.Rows(t, consumer))
		})
	}
}

func TestMiddleware_AHandlerNameThatCannotBeAConsumerNameIsNackedNotDeadLettered(t *testing.T) {
	t.Parallel()
	for name, handler := range map[string]string{
		"ANULByte":     "wallet\x00credits",
		"PastTheLimit": strings.Repeat("h", 3000),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newBundle(t)
			dlq := &testkit.RecordingPublisher{}
			pubsub := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
			t.Cleanup(func() { _ = pubsub.Close() })
			router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
			require.NoError(t, err)
			results := make(chan error, 100)
			router.AddMiddleware(func(h message.HandlerFunc) message.HandlerFunc { // sees what the router acks or nacks
				return func(msg *message.Message) ([]*message.Message, error) {
					out, err := h(msg)
					results <- err
					return out, err
				}
			})
			router.AddMiddleware(inbox.Middleware(b.db, inbox.WithTable(b.Table), inbox.WithLogger(b.Logs),
				inbox.WithDeadLetter(dlq, "dlq"), inbox.WithRejectDelay(20*time.Millisecond)))
			var calls atomic.Int64
			router.AddConsumerHandler(handler, "deposits", pubsub, testkit.NoPublish(b.Credit(100, &calls)))
			testkit.RunRouter(t, router)
			require.NoError(t, pubsub.Publish("deposits", newMsg("evt-1")))

			for range 2 { // the first delivery and a redelivery
				select {
				case err := <-results:
					require.ErrorIs(t, err, inbox.ErrInvalidOption, "a nack: the configuration is wrong")
					require.False(t, errors.Is(err, inbox.ErrInvalidEventID), "the event ID is not to blame")
				case <-time.After(10 * time.Second):
					t.Fatal("the message was not delivered")
				}
			}
			require.Zero(t, calls.Load())
			require.Empty(t, dlq.Messages("dlq"), "the message is fine, and is kept")
		})
	}
}

// TestMaintenanceOptions_MisuseIsAnErrorBeforeAnyConnection: every maintenance call checks its options together
// and refuses a bad one with ErrInvalidOption before it reaches for the database, here a closed port, which would
// answer with a connection error instead.
func TestMaintenanceOptions_MisuseIsAnErrorBeforeAnyConnection(t *testing.T) {
	t.Parallel()
	db, err := sql.Open(testDriver, "postgres://root@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	d := inbox.OnSQL(db)
	ctx := context.Background()
	calls := map[string]func(opts ...inbox.MaintenanceOption) error{
		"Migrate":    func(opts ...inbox.MaintenanceOption) error { return d.Migrate(ctx, opts...) },
		"Migrations": func(opts ...inbox.MaintenanceOption) error { _, err := d.Migrations(opts...); return err },
		"Cleanup": func(opts ...inbox.MaintenanceOption) error {
			_, err := d.Cleanup(ctx, inbox.CleanupParams{}, opts...)
			return err
		},
		"NewCleaner": func(opts ...inbox.MaintenanceOption) error {
			_, err := d.NewCleaner(inbox.CleanerConfig{}, opts...)
			return err
		},
		"ReadStats": func(opts ...inbox.MaintenanceOption) error { _, err := d.ReadStats(ctx, opts...); return err },
		"Forget": func(opts ...inbox.MaintenanceOption) error {
			_, err := d.Forget(ctx, inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-1"}, opts...)
			return err
		},
		"Remembers": func(opts ...inbox.MaintenanceOption) error { _, err := d.Remembers(ctx, opts...); return err },
	}
	cases := map[string][]inbox.MaintenanceOption{
		"ANilOption":                {inbox.WithTable("billing_inbox"), nil},
		"ATableNameWithCapitals":    {inbox.WithTable("Billing")},
		"AnUnknownIDType":           {inbox.WithIDType("bigint")},
		"PartitionsOfTextIDs":       {inbox.WithPartitions(24 * time.Hour)},
		"PartitionsOfHalfAMinute":   {inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(30 * time.Second)},
		"ANilOptionAfterGoodOnes":   {inbox.WithLogger(nil), inbox.WithObserver(nil), nil},
		"ATableNameTooLongToBeKept": {inbox.WithTable(strings.Repeat("t", 49))},
	}
	for call, f := range calls {
		for name, opts := range cases {
			t.Run(call+"/"+name, func(t *testing.T) {
				require.ErrorIs(t, f(opts...), inbox.ErrInvalidOption)
			})
		}
	}
}
