// Command payments shows the inbox's lease mode charging payments through a provider, on Kafka and PostgreSQL.
//
// A charge happens at the provider, outside the database, so no transaction can hold it together with the inbox
// row. Lease mode records the request as 'processing' under a lease instead, the handler calls the provider with
// the lease's idempotency key, and the row becomes 'done' only if the lease is still the handler's. The provider is
// a stand-in on loopback, started by the example, that honours the Idempotency-Key header.
//
// Some requests are published twice, each copy on another partition than its original, so both are handled at
// once. For one of them the provider makes the charge but holds its answer back past the lease: the other copy takes
// over as attempt 2, calls with the same key, and gets the first charge replayed instead of a second one.
//
//	go run ./example/payments                               # in-process Kafka (kfake), local PostgreSQL
//	KAFKA_BROKERS=localhost:9092 go run ./example/payments  # a real cluster
//	DATABASE_URL=postgres://... go run ./example/payments   # another database
//
// It exits non-zero unless each request was charged exactly once.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/example/internal/demoenv"
	"github.com/effectively-once/watermill-inbox/example/internal/kafkademo"
)

// inboxTable keeps the example's inbox apart from the default table and from every other example's, so a rerun
// can empty it without touching anyone's history.
const inboxTable = "example_payments_inbox"

// config is what a run needs; configFromEnv fills it for the command and the test fills it for itself.
type config struct {
	DatabaseURL string
	Brokers     []string // empty: start an in-process kfake cluster
	Partitions  int32
	Requests    int           // unique payment requests
	Resends     int           // how many of them are published a second time, to another partition
	Lease       time.Duration // the inbox lease; the held provider answer outlasts it
	Timeout     time.Duration
	Logger      watermill.LoggerAdapter
}

func configFromEnv() config {
	return config{
		DatabaseURL: demoenv.DatabaseURL(),
		Brokers:     kafkademo.BrokersFromEnv(),
		Partitions:  4,
		Requests:    12,
		Resends:     4,
		Lease:       time.Second,
		Timeout:     20 * time.Second,
		Logger:      watermill.NopLogger{},
	}
}

func main() {
	demoenv.SetUsage("./example/payments", "Charges payments through a provider in lease mode: some requests arrive twice at once, one provider answer\n"+
		"outlasts its lease, and each request must still be charged exactly once.")
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
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
	res.print(os.Stdout)
	if problems := res.problems(); len(problems) > 0 {
		fmt.Fprintln(os.Stderr, "\npayments: "+strings.Join(problems, "\npayments: "))
		os.Exit(1)
	}
	fmt.Printf("\nok: %d requests, %d charges, each request charged exactly once\n", res.Requests, res.Charges)
}

// run publishes the requests, charges them through the inbox in lease mode, and reports what the provider did.
func run(ctx context.Context, cfg config) (res result, err error) {
	db, err := sql.Open("postgres", cfg.DatabaseURL)
	if err != nil {
		return res, err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return res, fmt.Errorf("connect to PostgreSQL (set DATABASE_URL): %w", err)
	}
	if err := inbox.OnSQL(db).Migrate(ctx, inbox.WithTable(inboxTable)); err != nil {
		return res, fmt.Errorf("migrate inbox: %w", err)
	}
	if _, err := db.ExecContext(ctx, `TRUNCATE `+inboxTable+` CASCADE`); err != nil {
		return res, fmt.Errorf("empty inbox: %w", err)
	}

	reqs := planRequests(cfg.Requests)
	res.Requests, res.Resent, res.Lease = len(reqs), cfg.Resends, cfg.Lease
	res.Held = reqs[0].PaymentID
	provider, err := startProvider(res.Held)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, provider.Close()) }()

	brokers, stopBrokers, err := kafkademo.StartBrokers(cfg.Brokers)
	if err != nil {
		return res, err
	}
	defer stopBrokers()
	res.Brokers, res.InProcess = brokers, len(cfg.Brokers) == 0

	// A fresh topic and group per run: on a long-lived cluster, requests left from an earlier run would otherwise
	// be charged again by this run's fresh provider.
	runID := watermill.NewShortUUID()
	res.Topic = "payment-requests-" + runID
	sub, err := kafkademo.NewSubscriber(brokers, "payments-"+runID, cfg.Partitions, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer sub.Close() // the router closes it as well; this covers the returns before the router owns it
	if err := sub.SubscribeInitialize(res.Topic); err != nil {
		return res, err
	}

	seen := &counters{}
	made := &calls{}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, cfg.Logger)
	if err != nil {
		return res, err
	}
	// Router middleware runs in the order added: the counter sees what the inbox returns.
	router.AddMiddleware(seen.countLeaseErrors, inbox.Middleware(db,
		inbox.WithTable(inboxTable),
		inbox.WithLease(cfg.Lease),
		inbox.WithObserver(seen),
		inbox.WithLogger(cfg.Logger),
	))
	client := providerClient{url: provider.URL, http: &http.Client{Timeout: cfg.Timeout + 5*time.Second}}
	router.AddConsumerHandler("payments", res.Topic, sub, payments{provider: client, calls: made}.charge)
	stopRouter := startRouter(ctx, router)
	defer func() { err = errors.Join(err, stopRouter()) }()
	// Deferred after the router's stop, so it runs first: a run that gives up before the takeover must not leave
	// the router waiting on the held call as it closes.
	defer provider.releaseHeld()

	kafkaPub, err := kafkademo.NewPartitionPublisher(brokers, cfg.Logger)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, kafkaPub.Close()) }()
	if err := publishRequests(inbox.EventIDPublisher(kafkaPub, ""), res.Topic, reqs, cfg.Resends, cfg.Partitions); err != nil {
		return res, err
	}

	// Done when every request is charged, the held answer has come back to its caller and been refused, and every
	// copy that arrived after its request was done has been skipped.
	if err := waitFor(ctx, cfg.Timeout, func() (bool, string) {
		heldCalls := len(made.of(res.Held))
		done := provider.charges.Load() >= int64(len(reqs)) && heldCalls >= 2 && seen.lost.Load() >= 1 &&
			seen.skipped.Load() >= int64(cfg.Resends)
		return done, fmt.Sprintf("%d of %d requests charged, %d calls returned for %s, %d leases lost, %d of %d copies skipped",
			provider.charges.Load(), len(reqs), heldCalls, res.Held, seen.lost.Load(), seen.skipped.Load(), cfg.Resends)
	}); err != nil {
		return res, err
	}
	if err := stopRouter(); err != nil {
		return res, fmt.Errorf("stop the payments service: %w", err)
	}

	res.Calls, res.Charges, res.Replays = provider.calls.Load(), provider.charges.Load(), provider.replays.Load()
	res.PerPayment = provider.chargesPerPayment()
	res.Claimed, res.Skipped, res.TakenOver = seen.claimed.Load(), seen.skipped.Load(), seen.takenOver.Load()
	res.BusyNacks, res.LostLeases = seen.held.Load(), seen.lost.Load()
	res.HeldCalls = made.of(res.Held)
	for _, r := range reqs {
		res.PaymentIDs = append(res.PaymentIDs, r.PaymentID)
	}
	return res, nil
}

// startRouter runs r in the background. The returned stop closes r and returns what Run returned; calling it
// again returns the same.
func startRouter(ctx context.Context, r *message.Router) (stop func() error) {
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return sync.OnceValue(func() error { return errors.Join(r.Close(), <-done) })
}

// waitFor polls check until it reports done, and gives up after timeout with the last status it described.
func waitFor(ctx context.Context, timeout time.Duration, check func() (done bool, status string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		done, status := check()
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gave up after %s: %s", timeout, status)
		case <-tick.C:
		}
	}
}
