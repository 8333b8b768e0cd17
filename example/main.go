// Command example credits wallets from Kafka through the inbox middleware. It publishes a batch of credit events,
// publishes some of them a second time with the same event ID, as an outbox relay does after a restart, and shows
// that every balance ends up equal to the sum of the unique credits.
//
//	go run ./example                               # in-process Kafka (kfake), local PostgreSQL
//	KAFKA_BROKERS=localhost:9092 go run ./example  # a real cluster
//	DATABASE_URL=postgres://... go run ./example   # another database
//
// It exits non-zero when a balance is wrong.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/example/internal/demoenv"
	"github.com/effectively-once/watermill-inbox/example/internal/kafkademo"
)

// config is what a run needs; configFromEnv fills it for the command and the test fills it for itself.
type config struct {
	DatabaseURL string
	Brokers     []string // empty: start an in-process kfake cluster
	Partitions  int32
	Accounts    int
	Events      int // unique credit events
	Resends     int // how many of them are published a second time
	Timeout     time.Duration
	Logger      watermill.LoggerAdapter
}

func configFromEnv() config {
	return config{
		DatabaseURL: demoenv.DatabaseURL(),
		Brokers:     kafkademo.BrokersFromEnv(),
		Partitions:  4,
		Accounts:    3,
		Events:      24,
		Resends:     6,
		Timeout:     20 * time.Second,
		Logger:      watermill.NopLogger{},
	}
}

func main() {
	demoenv.SetUsage("./example", "Publishes credit events to Kafka, some of them twice with the same event ID, credits wallets through the\n"+
		"inbox middleware, and checks that every balance is the sum of its unique credits.")
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
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
	res.print(os.Stdout)
	if wrong := res.wrongBalances(); len(wrong) > 0 {
		fmt.Fprintln(os.Stderr, "example: balances wrong:", strings.Join(wrong, "; "))
		os.Exit(1)
	}
	fmt.Println("\nok: every balance is the sum of its unique credits")
}

// run publishes the credits, consumes them through the inbox and reports what the accounts hold afterwards.
func run(ctx context.Context, cfg config) (res result, err error) {
	db, err := sql.Open("postgres", cfg.DatabaseURL)
	if err != nil {
		return res, err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return res, fmt.Errorf("connect to PostgreSQL (set DATABASE_URL): %w", err)
	}
	if err := resetDatabase(ctx, db, cfg.Accounts); err != nil {
		return res, err
	}

	brokers, stopBrokers, err := kafkademo.StartBrokers(cfg.Brokers)
	if err != nil {
		return res, err
	}
	defer stopBrokers()
	res.Brokers, res.InProcess = brokers, len(cfg.Brokers) == 0

	// A fresh topic and group per run: on a long-lived cluster, events left from an earlier run would otherwise be
	// credited to this run's freshly zeroed accounts.
	runID := watermill.NewShortUUID()
	res.Topic = "deposits-" + runID
	sub, err := kafkademo.NewSubscriber(brokers, "wallet-credits-"+runID, cfg.Partitions, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer sub.Close() // the router closes it as well; this covers the returns before the router owns it
	if err := sub.SubscribeInitialize(res.Topic); err != nil {
		return res, err
	}

	skips := &skipCounter{}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, cfg.Logger)
	if err != nil {
		return res, err
	}
	// The inbox scopes event IDs by handler name, so the rows it writes here say "wallet-credits applied event X";
	// a second handler on the same topic would apply each event once for itself.
	router.AddMiddleware(inbox.Middleware(db, inbox.WithTable(inboxTable), inbox.WithLogger(cfg.Logger), inbox.WithObserver(skips)))
	router.AddConsumerHandler("wallet-credits", res.Topic, sub, creditAccount)
	routerDone := make(chan error, 1)
	go func() { routerDone <- router.Run(ctx) }()
	defer func() { err = errors.Join(err, router.Close(), <-routerDone) }()

	kafkaPub, err := kafkademo.NewPublisher(brokers, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, kafkaPub.Close()) }()
	pub := inbox.EventIDPublisher(kafkaPub, "")

	events := planCredits(cfg.Accounts, cfg.Events)
	res.Expected = make(map[int64]int64, cfg.Accounts)
	for _, e := range events {
		res.Expected[e.AccountID] += e.Amount
		if err := publishCredit(pub, res.Topic, e); err != nil {
			return res, err
		}
	}
	// The resends reuse the original message UUID, which EventIDPublisher turned into the event ID. To Kafka they
	// are new records at new offsets; only the event ID says they were seen before.
	for i := range cfg.Resends {
		if err := publishCredit(pub, res.Topic, events[i*len(events)/cfg.Resends]); err != nil {
			return res, err
		}
	}
	res.Unique, res.Resent = len(events), cfg.Resends

	if err := waitUntilHandled(ctx, db, skips, res.Unique, res.Unique+res.Resent, cfg.Timeout); err != nil {
		return res, err
	}
	res.Skipped = skips.count()
	if res.Applied, err = ledgerLines(ctx, db); err != nil {
		return res, err
	}
	res.Balances, err = balances(ctx, db)
	return res, err
}

// waitUntilHandled returns once every unique event is in the ledger and every published copy has been either applied
// or skipped. Counting both sides means a broken inbox ends the wait too, with balances that show the damage.
func waitUntilHandled(ctx context.Context, db *sql.DB, skips *skipCounter, unique, published int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var applied int
	for {
		n, err := ledgerLines(ctx, db)
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("count ledger lines: %w", err)
		}
		if err == nil {
			applied = n
		}
		if applied >= unique && applied+int(skips.count()) >= published {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %s: %d of %d credits applied, %d of %d duplicates skipped",
				timeout, applied, unique, skips.count(), published-unique)
		case <-tick.C:
		}
	}
}

// creditAccount is the wallet-credits handler. Both statements run on the inbox's transaction, so the credit, its
// ledger line and the inbox row that marks the event as done commit together or not at all.
func creditAccount(msg *message.Message) error {
	tx, ok := inbox.TxFromContext(msg.Context())
	if !ok {
		return errors.New("wallet-credits: no inbox transaction; is inbox.Middleware installed?")
	}
	eventID, _ := inbox.EventIDFromContext(msg.Context())

	var c credit
	if err := json.Unmarshal(msg.Payload, &c); err != nil {
		return fmt.Errorf("wallet-credits: decode credit %s: %w", eventID, err)
	}
	ctx := msg.Context()
	if _, err := tx.ExecContext(ctx,
		`UPDATE example_accounts SET balance = balance + $1 WHERE id = $2`, c.Amount, c.AccountID); err != nil {
		return fmt.Errorf("wallet-credits: credit account %d: %w", c.AccountID, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO example_ledger (event_id, account_id, amount) VALUES ($1, $2, $3)`,
		eventID, c.AccountID, c.Amount); err != nil {
		return fmt.Errorf("wallet-credits: record ledger line: %w", err)
	}
	return nil
}
