// Command outbox shows the inbox and the outbox working together, on Kafka and PostgreSQL.
//
// The wallet service credits accounts from the deposits topic through the inbox and, in the same transaction,
// writes a "credited" event to an outbox table with watermill-sql v4's publisher. Watermill's forwarder relays the
// outbox to the credited topic, reading it as a queue (outbox.go says why), and the notifications service, with an
// inbox of its own, records one notification per credit.
//
// Two failures are staged on purpose. The wallet service stops after its credits commit and before any event is
// relayed, as if it crashed there: the events wait in the outbox, and nothing is lost. The relay then loses the
// broker's ack on every few publishes, so it publishes those events again: the notifications inbox skips the copies.
//
//	go run ./example/outbox                               # in-process Kafka (kfake), local PostgreSQL
//	KAFKA_BROKERS=localhost:9092 go run ./example/outbox  # a real cluster
//	DATABASE_URL=postgres://... go run ./example/outbox   # another database
//
// It exits non-zero when a balance is wrong, an event is missing from the outbox, or the notifications are not
// exactly one per credit.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/example/internal/demoenv"
	"github.com/effectively-once/watermill-inbox/example/internal/kafkademo"
)

// config is what a run needs; configFromEnv fills it for the command and the test fills it for itself.
type config struct {
	DatabaseURL  string
	Brokers      []string // empty: start an in-process kfake cluster
	Partitions   int32
	Accounts     int
	Events       int // unique deposits
	Resends      int // how many deposits are published a second time
	LoseAckEvery int // the relay loses the broker's ack on every n-th publish
	Timeout      time.Duration
	Logger       watermill.LoggerAdapter
}

func configFromEnv() config {
	return config{
		DatabaseURL:  demoenv.DatabaseURL(),
		Brokers:      kafkademo.BrokersFromEnv(),
		Partitions:   4,
		Accounts:     3,
		Events:       24,
		Resends:      4,
		LoseAckEvery: 5,
		Timeout:      20 * time.Second,
		Logger:       watermill.NopLogger{},
	}
}

func main() {
	demoenv.SetUsage("./example/outbox", "Credits wallets through the inbox and writes a \"credited\" event to an outbox in the same transaction; a relay\n"+
		"publishes the events, losing some acks on purpose, and a notifications service with its own inbox records one\n"+
		"notification per credit.")
	verbose := flag.Bool("v", false, "log Watermill, Kafka and inbox messages to stderr")
	flag.Parse()
	cfg := configFromEnv()
	if *verbose {
		cfg.Logger = watermill.NewStdLogger(false, false)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outbox:", err)
		os.Exit(1)
	}
	res.print(os.Stdout)
	if problems := res.problems(); len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "\noutbox: "+strings.Join(problems, "\noutbox: "))
		os.Exit(1)
	}
	fmt.Println("\nok: every credit applied once, relayed at least once, and notified exactly once")
}

// run stages the whole story: deposits in, credits and outbox rows committed, the wallet service gone, the relay
// up with its lossy acks, and the notifications counted.
func run(ctx context.Context, cfg config) (res result, err error) {
	db, err := sql.Open("postgres", cfg.DatabaseURL)
	if err != nil {
		return res, err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return res, fmt.Errorf("connect to PostgreSQL (set DATABASE_URL): %w", err)
	}
	if err := resetDatabase(ctx, db, cfg.Accounts, cfg.Logger); err != nil {
		return res, err
	}

	brokers, stopBrokers, err := kafkademo.StartBrokers(cfg.Brokers)
	if err != nil {
		return res, err
	}
	defer stopBrokers()
	res.Brokers, res.InProcess = brokers, len(cfg.Brokers) == 0

	// Fresh topics and groups per run: on a long-lived cluster, events left from an earlier run would otherwise
	// reach this run's freshly emptied tables.
	runID := watermill.NewShortUUID()
	res.DepositsTopic, res.CreditedTopic = "deposits-"+runID, "credited-"+runID

	// The notifications service runs from the start, so that an event reaching it before the relay runs would show.
	notifySkips := &skipCounter{}
	notifySub, err := kafkademo.NewSubscriber(brokers, "notifications-"+runID, cfg.Partitions, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer notifySub.Close() // the router closes it as well; this covers the returns before the router owns it
	if err := notifySub.SubscribeInitialize(res.CreditedTopic); err != nil {
		return res, err
	}
	notifier, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, cfg.Logger)
	if err != nil {
		return res, err
	}
	// Its own inbox table, as another service with its own database would have.
	notifier.AddMiddleware(inbox.Middleware(db, inbox.WithTable(notifyInboxTable), inbox.WithObserver(notifySkips), inbox.WithLogger(cfg.Logger)))
	notifier.AddConsumerHandler("notifications", res.CreditedTopic, notifySub, recordNotification)
	stopNotifier := startRouter(ctx, notifier)
	defer func() { err = errors.Join(err, stopNotifier()) }()

	walletSkips := &skipCounter{}
	walletSub, err := kafkademo.NewSubscriber(brokers, "wallet-credits-"+runID, cfg.Partitions, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer walletSub.Close()
	if err := walletSub.SubscribeInitialize(res.DepositsTopic); err != nil {
		return res, err
	}
	walletRouter, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, cfg.Logger)
	if err != nil {
		return res, err
	}
	walletRouter.AddMiddleware(inbox.Middleware(db, inbox.WithTable(walletInboxTable), inbox.WithObserver(walletSkips), inbox.WithLogger(cfg.Logger)))
	walletRouter.AddConsumerHandler("wallet-credits", res.DepositsTopic, walletSub, wallet{creditedTopic: res.CreditedTopic}.creditAccount)
	stopWallet := startRouter(ctx, walletRouter)
	defer func() { err = errors.Join(err, stopWallet()) }()

	kafkaPub, err := kafkademo.NewPublisher(brokers, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, kafkaPub.Close()) }()
	if res.Expected, err = publishDeposits(inbox.EventIDPublisher(kafkaPub, ""), res.DepositsTopic, cfg); err != nil {
		return res, err
	}
	res.Unique, res.Resent = cfg.Events, cfg.Resends

	if err := waitFor(ctx, cfg.Timeout, func(ctx context.Context) (bool, string, error) {
		n, err := count(ctx, db, ledgerTable)
		done := n >= res.Unique && n+int(walletSkips.count()) >= res.Unique+res.Resent
		return done, fmt.Sprintf("%d of %d credits applied, %d of %d duplicate deposits skipped",
			n, res.Unique, walletSkips.count(), res.Resent), err
	}); err != nil {
		return res, err
	}
	// The wallet service goes away after its last commit and before any relay has run: whatever it promised to
	// announce must now be in the outbox, or it is lost.
	if err := stopWallet(); err != nil {
		return res, fmt.Errorf("stop the wallet service: %w", err)
	}
	res.WalletSkipped = walletSkips.count()
	if res.Credits, err = count(ctx, db, ledgerTable); err != nil {
		return res, err
	}
	if res.Waiting, err = count(ctx, db, outboxTable); err != nil {
		return res, err
	}
	if res.NotifiedEarly, err = count(ctx, db, notificationsTable); err != nil {
		return res, err
	}

	relay, err := newRelay(db, kafkaPub, cfg.LoseAckEvery, cfg.Logger)
	if err != nil {
		return res, err
	}
	stopRelay := startForwarder(ctx, relay.fwd)
	defer func() { err = errors.Join(err, stopRelay()) }()
	if err := waitFor(ctx, cfg.Timeout, func(ctx context.Context) (bool, string, error) {
		left, err := count(ctx, db, outboxTable)
		if err != nil {
			return false, "", err
		}
		n, err := count(ctx, db, notificationsTable)
		published := relay.out.publishes.Load()
		done := left == 0 && n >= res.Waiting && int64(n)+notifySkips.count() >= published
		return done, fmt.Sprintf("%d events left in the outbox, relay published %d (%d acks lost); %d of %d notifications, %d duplicates skipped",
			left, published, relay.out.lost.Load(), n, res.Waiting, notifySkips.count()), err
	}); err != nil {
		return res, err
	}
	if err := stopRelay(); err != nil {
		return res, fmt.Errorf("stop the relay: %w", err)
	}
	res.RelayPublishes, res.RelayResent = relay.out.publishes.Load(), relay.out.lost.Load()
	if res.LeftInOutbox, err = count(ctx, db, outboxTable); err != nil {
		return res, err
	}
	res.NotifySkipped = notifySkips.count()
	if res.Notifications, res.NotifiedEvents, err = notifications(ctx, db); err != nil {
		return res, err
	}
	res.Balances, err = balances(ctx, db)
	return res, err
}

// startRouter runs r in the background. The returned stop closes r and returns what Run returned; calling it
// again returns the same.
func startRouter(ctx context.Context, r *message.Router) (stop func() error) {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return sync.OnceValue(func() error { return errors.Join(r.Close(), <-done) })
}

// startForwarder is startRouter for a forwarder, whose router is its own.
func startForwarder(ctx context.Context, f *forwarder.Forwarder) (stop func() error) {
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	return sync.OnceValue(func() error { return errors.Join(f.Close(), <-done) })
}

// waitFor polls check until it reports done, and gives up after timeout with the last status it described. A check
// that counts every copy, applied or skipped, ends the wait on a broken inbox too, with numbers that show the damage.
func waitFor(ctx context.Context, timeout time.Duration, check func(context.Context) (done bool, status string, err error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, status, err := check(ctx)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil && done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %s: %s", timeout, status)
		case <-tick.C:
		}
	}
}
