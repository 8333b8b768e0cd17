package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/stretchr/testify/require"

	"github.com/effectively-once/watermill-inbox/example/internal/demotest"
)

func TestMain(m *testing.M) { os.Exit(demotest.RunInOwnDatabase(m)) }

// The run needs PostgreSQL (DATABASE_URL, or the local default) and fails, never skips, when it is missing: a green
// test that proved nothing would be worse than a red one.
func TestRunRelaysEveryCommittedCreditAndNotifiesEachOnceDespiteResends(t *testing.T) {
	demotest.NeedsDatabase(t)
	cfg := configFromEnv()
	// Always the in-process broker: the test must not depend on, or write to, a cluster that KAFKA_BROKERS names.
	cfg.Brokers = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	res, err := run(ctx, cfg)
	require.NoError(t, err)
	require.Empty(t, res.problems())

	require.Equal(t, cfg.Events, res.Credits, "each unique deposit credited exactly once")
	require.Len(t, res.Balances, cfg.Accounts)
	// A rebalance may redeliver an original too, so there can be more skips than resends, never fewer.
	require.GreaterOrEqual(t, res.WalletSkipped, int64(cfg.Resends))

	require.Equal(t, cfg.Events, res.Waiting, "with the wallet service gone, every credit's event waits in the outbox")
	require.Zero(t, res.NotifiedEarly, "nothing reaches Kafka before the relay runs")

	require.NotZero(t, res.RelayResent, "the relay lost acks and published again")
	require.Zero(t, res.LeftInOutbox, "the relay drained the outbox")
	require.GreaterOrEqual(t, res.RelayPublishes, int64(cfg.Events)+res.RelayResent)
	require.Equal(t, cfg.Events, res.Notifications, "one notification per credit")
	require.Equal(t, cfg.Events, res.NotifiedEvents)
	require.GreaterOrEqual(t, res.NotifySkipped, res.RelayPublishes-int64(cfg.Events), "every extra copy the relay sent is skipped")
}

func TestLossyAcksPublishesEveryMessageAndFailsEveryNthCall(t *testing.T) {
	t.Parallel()
	ch := gochannel.NewGoChannel(gochannel.Config{Persistent: true}, nil)
	t.Cleanup(func() { _ = ch.Close() })
	p := &lossyAcks{Publisher: ch, every: 3}

	var failed []int
	for i := 1; i <= 7; i++ {
		if err := p.Publish("t", message.NewMessage("m", nil)); err != nil {
			require.ErrorIs(t, err, errAckLost)
			failed = append(failed, i)
		}
	}
	require.Equal(t, []int{3, 6}, failed)
	require.EqualValues(t, 7, p.publishes.Load())
	require.EqualValues(t, 2, p.lost.Load())

	msgs, err := ch.Subscribe(context.Background(), "t")
	require.NoError(t, err)
	for range 7 { // the failed calls reached the broker too
		(<-msgs).Ack()
	}
}

func TestProblemsNamesEachShortfall(t *testing.T) {
	t.Parallel()
	good := result{
		Unique: 3, Credits: 3, Waiting: 3, Notifications: 3, NotifiedEvents: 3,
		Balances: map[int64]int64{1: 100}, Expected: map[int64]int64{1: 100},
	}
	require.Empty(t, good.problems())

	bad := good
	bad.Balances = map[int64]int64{1: 150}
	bad.Waiting = 2
	bad.NotifiedEarly = 1
	bad.Notifications, bad.NotifiedEvents = 4, 3
	require.Equal(t, []string{
		"account 1 has 150, want 100",
		"2 events waited in the outbox, want one per credit: 3",
		"1 notifications before the relay started, want none",
		"4 notifications for 3 distinct events, want one per credit: 3",
	}, bad.problems())
}

// A reader's first question is what the example connects to: -h names both variables and what happens without them.
func TestHelpNamesTheEnvironmentAndItsDefaults(t *testing.T) {
	t.Parallel()
	help := demotest.Help(t)
	require.Contains(t, help, "DATABASE_URL")
	require.Contains(t, help, "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	require.Contains(t, help, "KAFKA_BROKERS")
	require.Contains(t, help, "inside the process")
	require.Contains(t, help, "-v")
}
