package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
)

// variant is how a consumer orders its acknowledgement and its database commit.
type variant string

const (
	// atMostOnce acks before the handler runs (Watermill's InstantAck middleware); no inbox.
	atMostOnce variant = "at-most-once"
	// afterDB acks after the database commit, with watermill-kafka's defaults: Sarama marks the offset on ack
	// and commits marked offsets in the background every second.
	afterDB variant = "after-db"
	// afterDBSync acks after the database commit and commits the offset synchronously on every ack:
	// watermill-kafka calls session.Commit() after each mark when Sarama's auto-commit is disabled.
	afterDBSync variant = "after-db-sync"
	// inboxVariant is this library: the credit and the event ID commit in one transaction, then the ack, with
	// watermill-kafka's defaults for the offset.
	inboxVariant variant = "inbox"
	// batchVariant is the inbox in batch mode (WithBatch): the handlers in flight at once share one transaction,
	// one claim statement and one commit, then each is acked.
	batchVariant variant = "batch"
	// batchPgxVariant is batchVariant on pgx v5: pgxinbox over a pgxpool.Pool, the handler crediting on the pgx.Tx
	// of pgxinbox.TxFromContext. Only consume-transport runs it.
	batchPgxVariant variant = "batch-pgx"
	// partitionedVariant is inboxVariant on a table of managed partitions (WithPartitions, one an hour) keyed by
	// uuid: the events carry UUIDv7 IDs (StampUUIDv7), so each claim lands in the partition of its ID's hour.
	partitionedVariant variant = "inbox-partitioned"
	// atCommitVariant is inboxVariant on pgx v5 with the claim sent with COMMIT (WithClaimAtCommit): pgxinbox over
	// a pgxpool.Pool, the handler crediting on the pgx.Tx of pgxinbox.TxFromContext before the claim is made.
	atCommitVariant variant = "inbox-atcommit"
)

var allVariants = []variant{atMostOnce, afterDB, afterDBSync, inboxVariant, batchVariant, batchPgxVariant, partitionedVariant, atCommitVariant}

// usesInbox reports whether the variant's handler runs under the inbox middleware.
func (v variant) usesInbox() bool {
	return v == inboxVariant || v == partitionedVariant || v == atCommitVariant || v.batched()
}

// table is the inbox table the variant's consumers claim in.
func (v variant) table() string {
	if v == partitionedVariant {
		return partitionedTable
	}
	return inboxTable
}

// publisherOptions are how the variant's events get their IDs: UUIDv7 for the partitioned table, Watermill's
// message UUID otherwise.
func (v variant) publisherOptions() []inbox.PublisherOption {
	if v == partitionedVariant {
		return []inbox.PublisherOption{inbox.StampUUIDv7()}
	}
	return nil
}

// batched reports whether the variant runs the inbox in batch mode.
func (v variant) batched() bool { return v == batchVariant || v == batchPgxVariant }

// batchConfig is how a batch variant sets WithBatch and WithBatchConcurrency.
type batchConfig struct {
	Wait        time.Duration // how long a batch waits to fill while others run; 0: it never waits
	Size        int           // most messages per batch
	Concurrency int           // batches of the consumer in flight at once
}

// defaultBatch is what the harness runs batch mode with unless told otherwise: no wait, the largest batches, and
// the library's default concurrency. Batches then grow with the load, as in group commit: a message never waits
// while a slot is free, and the messages that arrive while every slot is taken go together in the next batch.
var defaultBatch = batchConfig{Wait: 0, Size: inbox.MaxBatchSize, Concurrency: inbox.DefaultBatchConcurrency}

// options returns the inbox options of batch mode.
func (b batchConfig) options() []inbox.Option {
	return []inbox.Option{inbox.WithBatch(b.Wait, b.Size), inbox.WithBatchConcurrency(b.Concurrency)}
}

// register adds the batch flags to fs.
func (b *batchConfig) register(fs *flag.FlagSet) {
	fs.DurationVar(&b.Wait, "batch-wait", defaultBatch.Wait, "batch variants: how long a batch waits to fill while others run (WithBatch's maxWait)")
	fs.IntVar(&b.Size, "batch-size", defaultBatch.Size, "batch variants: most messages per batch (WithBatch's maxSize)")
	fs.IntVar(&b.Concurrency, "batch-concurrency", defaultBatch.Concurrency, "batch variants: batches in flight at once (WithBatchConcurrency)")
}

// validate reports a setting WithBatch or WithBatchConcurrency would refuse, before any consumer is started.
func (b batchConfig) validate() error {
	if b.Size < 1 || b.Size > inbox.MaxBatchSize || b.Wait < 0 || b.Concurrency < 1 {
		return fmt.Errorf("--batch-size must be 1 to %d, --batch-wait 0 or more and --batch-concurrency 1 or more (got %d, %s, %d)",
			inbox.MaxBatchSize, b.Size, b.Wait, b.Concurrency)
	}
	return nil
}

// args renders b as command-line flags; the zero value as none, which leaves the consumer's defaults.
func (b batchConfig) args() []string {
	if b == (batchConfig{}) {
		return nil
	}
	return []string{"--batch-wait", b.Wait.String(), "--batch-size", fmt.Sprint(b.Size), "--batch-concurrency", fmt.Sprint(b.Concurrency)}
}

func parseVariant(s string) (variant, error) {
	for _, v := range allVariants {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown variant %q (want one of %v)", s, allVariants)
}

// consumerConfig is everything a consumer subprocess is told on its command line.
type consumerConfig struct {
	Variant          variant
	Brokers          []string
	Topic, Group     string
	DSN              string
	Run              string // scopes ledger rows and the inbox's consumer name
	Name             string // this process: its Kafka client ID, and the consumer column of its ledger rows
	Sleep            time.Duration
	Session          time.Duration
	Heartbeat        time.Duration
	Rebalance        time.Duration
	Pool             int
	CrashAfterCommit int           // SIGKILL self right after the Nth successful handling, before the ack
	StallEvery       int           // stall the first handling of every message whose seq % StallEvery == StallEvery-1
	StallFor         time.Duration // how long a stall lasts
	Expect           int           // print a "done" line after this many successful handlings
	Batch            batchConfig   // batch variant only
}

// args renders c as the command line of `harness consume`.
func (c consumerConfig) args() []string {
	return append([]string{"consume",
		"--variant", string(c.Variant),
		"--brokers", joinComma(c.Brokers),
		"--topic", c.Topic, "--group", c.Group,
		"--dsn", c.DSN, "--run", c.Run, "--name", c.Name,
		"--sleep", c.Sleep.String(),
		"--session-timeout", c.Session.String(),
		"--heartbeat", c.Heartbeat.String(),
		"--rebalance-timeout", c.Rebalance.String(),
		"--pool", fmt.Sprint(c.Pool),
		"--crash-after-commit-of", fmt.Sprint(c.CrashAfterCommit),
		"--stall-every", fmt.Sprint(c.StallEvery),
		"--stall-for", c.StallFor.String(),
		"--expect", fmt.Sprint(c.Expect),
	}, c.Batch.args()...)
}

func consumeCommand(args []string) error {
	fs := flag.NewFlagSet("consume", flag.ExitOnError)
	var c consumerConfig
	var v, brokers string
	fs.StringVar(&v, "variant", string(inboxVariant), "at-most-once, after-db, after-db-sync, inbox, batch or inbox-partitioned")
	fs.StringVar(&brokers, "brokers", "", "Kafka brokers, comma-separated")
	fs.StringVar(&c.Topic, "topic", "", "topic to consume")
	fs.StringVar(&c.Group, "group", "", "consumer group")
	fs.StringVar(&c.DSN, "dsn", defaultDSN, "PostgreSQL DSN")
	fs.StringVar(&c.Run, "run", "", "run ID")
	fs.StringVar(&c.Name, "name", "consumer", "this consumer's name")
	fs.DurationVar(&c.Sleep, "sleep", 10*time.Millisecond, "handler work per message")
	fs.DurationVar(&c.Session, "session-timeout", defaultSession, "group session timeout")
	fs.DurationVar(&c.Heartbeat, "heartbeat", defaultHeartbeat, "group heartbeat interval")
	fs.DurationVar(&c.Rebalance, "rebalance-timeout", defaultRebalance, "group rebalance timeout")
	fs.IntVar(&c.Pool, "pool", defaultPool, "database connections")
	fs.IntVar(&c.CrashAfterCommit, "crash-after-commit-of", 0, "SIGKILL itself after the Nth commit, before its ack (0: never)")
	fs.IntVar(&c.StallEvery, "stall-every", 0, "stall one message in this many, the first time it is handled (0: never)")
	fs.DurationVar(&c.StallFor, "stall-for", 0, "how long a stall lasts")
	fs.IntVar(&c.Expect, "expect", 0, "report a \"done\" line after this many messages (0: never)")
	c.Batch.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.Variant, err = parseVariant(v); err != nil {
		return err
	}
	c.Brokers = brokerList(brokers)
	if len(c.Brokers) == 0 || c.Topic == "" || c.Group == "" || c.Run == "" {
		return errors.New("consume: --brokers, --topic, --group and --run are required")
	}
	return consume(c)
}

// consumer is the state of one consumer process.
type consumer struct {
	cfg consumerConfig
	db  *sql.DB
	// pgx, when set, is the database instead of db: the handler credits through pgx v5 (see creditPgx), and joinsV4
	// says the message comes with watermill-sql v4's pgx transaction, which the inbox must have joined.
	pgx     *pgxpool.Pool
	joinsV4 bool
	out     *lineWriter
	handled atomic.Int64
	first   atomic.Int64 // unix ns of the first message, for throughput
	working sync.Once
}

// consume runs a Watermill router over watermill-kafka until SIGTERM. It reports on stdout, one line per fact the
// parent counts (see lineWriter); logs go to stderr.
func consume(c consumerConfig) error {
	out := &lineWriter{w: os.Stdout}
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	logger := &reportingLogger{LoggerAdapter: watermill.NewStdLoggerWithOut(os.Stderr, false, false), out: out}

	db, err := sql.Open("postgres", withAppName(c.DSN, c.Run))
	if err != nil {
		return err
	}
	defer db.Close()
	// One connection per partition the process may own, plus one for the stall bookkeeping, which runs beside an
	// open inbox transaction. The bound matters most for at-most-once, whose InstantAck lets the router start a
	// handler for every message at once: unbounded, they would exhaust the server's connections.
	db.SetMaxOpenConns(c.Pool)
	db.SetMaxIdleConns(c.Pool)

	sub, err := kafka.NewSubscriber(kafka.SubscriberConfig{
		Brokers:               c.Brokers,
		Unmarshaler:           kafka.DefaultMarshaler{},
		OverwriteSaramaConfig: saramaConsumerConfig(c),
		ConsumerGroup:         c.Group,
	}, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 2 * time.Minute}, logger)
	if err != nil {
		return err
	}
	cons := &consumer{cfg: c, db: db, out: out}
	h := router.AddConsumerHandler("credit", c.Topic, sub, cons.credit)
	// First added runs outermost: the report sees a message before the variant acks it, and after the inbox
	// committed it, which is where a crash between commit and ack has to land.
	h.AddMiddleware(cons.report)
	switch c.Variant {
	case atMostOnce:
		h.AddMiddleware(middleware.InstantAck)
	case inboxVariant, batchVariant, partitionedVariant:
		opts := []inbox.Option{inbox.WithTable(c.Variant.table()), inbox.WithConsumer(c.Run), inbox.WithLogger(logger)}
		if c.Variant.batched() {
			opts = append(opts, c.Batch.options()...)
		}
		if c.Variant == partitionedVariant {
			opts = append(opts, inbox.WithIDType(inbox.IDTypeUUID))
		}
		ib, err := inbox.New(db, opts...)
		if err != nil {
			return err
		}
		h.AddMiddleware(ib.Middleware)
	case atCommitVariant, batchPgxVariant:
		cfg, err := pgxpool.ParseConfig(withAppName(c.DSN, c.Run))
		if err != nil {
			return fmt.Errorf("parse %s for pgx: %w", c.DSN, err)
		}
		cfg.MaxConns = int32(c.Pool)
		if cons.pgx, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
			return fmt.Errorf("pgx pool on %s: %w", c.DSN, err)
		}
		defer cons.pgx.Close()
		opts := []inbox.Option{inbox.WithTable(c.Variant.table()), inbox.WithConsumer(c.Run), inbox.WithLogger(logger)}
		if c.Variant == atCommitVariant {
			opts = append(opts, inbox.WithClaimAtCommit())
		} else {
			opts = append(opts, c.Batch.options()...)
		}
		ib, err := pgxinbox.New(cons.pgx, opts...)
		if err != nil {
			return err
		}
		h.AddMiddleware(ib.Middleware)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		_ = router.Close()
	}()
	if err := router.Run(context.Background()); err != nil {
		return err
	}
	out.printf("closed %d", cons.handled.Load())
	return nil
}

// fetchMaxWait is how long the broker may hold a fetch that finds no new data; see saramaConsumerConfig.
const fetchMaxWait = 20 * time.Millisecond

// saramaConsumerConfig is watermill-kafka's default subscriber config with the group timeouts of the run, the
// oldest offset for a new group (Sarama's default, the newest, would skip the events published before the group
// first joined), and for after-db-sync, auto-commit off so that watermill-kafka commits on every ack.
func saramaConsumerConfig(c consumerConfig) *sarama.Config {
	cfg := kafka.DefaultSaramaSubscriberConfig()
	cfg.Version = kafkaVersion
	cfg.ClientID = c.Name
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.Session.Timeout = c.Session
	cfg.Consumer.Group.Heartbeat.Interval = c.Heartbeat
	cfg.Consumer.Group.Rebalance.Timeout = c.Rebalance
	// Sarama's default is to retry a failed join 4 times, 2 s apart, then give up; watermill-kafka then reconnects
	// after a second. Shorter retries keep a consumer from idling through the whole of a short run.
	cfg.Consumer.Group.Rebalance.Retry.Backoff = 250 * time.Millisecond
	// Sarama sends its offset commits on the connection its fetches use, and a broker answers the requests of one
	// connection in order. Once a consumer has fetched all there is, each fetch waits up to MaxWaitTime (500 ms by
	// default) for new data, and a synchronous commit queued behind it waits too: after-db-sync then handles one
	// message per partition per half second. A short wait keeps that tail from dominating the measurements; every
	// variant gets the same setting.
	cfg.Consumer.MaxWaitTime = fetchMaxWait
	if c.Variant == afterDBSync {
		cfg.Consumer.Offsets.AutoCommit.Enable = false
	}
	return cfg
}

// report is the outermost middleware: it tells the parent the consumer is working, counts handled messages, and
// crashes on request right after a commit and before the router acks.
func (cs *consumer) report(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		cs.working.Do(func() {
			cs.first.Store(time.Now().UnixNano())
			cs.out.printf("working")
		})
		produced, err := h(msg)
		if err != nil {
			id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
			if isDeadlock(err) {
				cs.out.printf("deadlock %s", id)
			}
			cs.out.printf("nack %s", id)
			return produced, err
		}
		n := cs.handled.Add(1)
		if cs.cfg.CrashAfterCommit > 0 && n == int64(cs.cfg.CrashAfterCommit) {
			cs.out.printf("crash %s", msg.Metadata.Get(inbox.DefaultIDMetadataKey))
			// SIGKILL, not os.Exit: no deferred function, no router close, no last offset commit.
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way; nothing after this line may run
		}
		if cs.cfg.Expect > 0 && n == int64(cs.cfg.Expect) {
			cs.out.printf("done %d %d %d", n, cs.first.Load(), time.Now().UnixNano())
		}
		return produced, err
	}
}

// credit is the handler: some work, then the credit, on the inbox's transaction or on one of its own, through
// database/sql or, in the transport matrix's pgx cells, pgx.
func (cs *consumer) credit(msg *message.Message) error {
	ctx := msg.Context()
	if cs.cfg.Variant == atMostOnce {
		// watermill-kafka cancels a message's context as soon as the message is acked, and InstantAck acks before
		// the handler runs: every database call on that context would fail with context.Canceled, which the
		// router does not even log, and the variant would lose every message with or without kills. Ack-first
		// code that works at all detaches from the cancellation, as here.
		ctx = context.WithoutCancel(ctx)
	}
	var c credit
	if err := json.Unmarshal(msg.Payload, &c); err != nil {
		return fmt.Errorf("decode credit: %w", err)
	}
	id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
	if err := cs.maybeStall(ctx, id, c.Seq); err != nil {
		return err
	}
	if cs.cfg.Sleep > 0 {
		time.Sleep(cs.cfg.Sleep)
	}
	args := []any{cs.cfg.Run, id, c.Account, c.Amount, cs.cfg.Name}
	if cs.pgx != nil {
		return cs.creditPgx(ctx, args)
	}
	if tx, ok := inbox.TxFromContext(ctx); ok {
		_, err := tx.ExecContext(ctx, creditSQL, args...)
		return err
	}
	tx, err := cs.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, creditSQL, args...); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// isDeadlock reports whether err is PostgreSQL's deadlock_detected (40P01), through lib/pq or pgx. The inbox
// wraps a handler's error with context, so the code is looked for along the chain; the text is the fallback for
// a wrapper that flattened it.
func isDeadlock(err error) bool {
	const code = "40P01"
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return pqErr.Code == code
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == code
	}
	return strings.Contains(err.Error(), "deadlock detected")
}

// maybeStall makes the first handling of one message in StallEvery outlast the group's rebalance timeout. The
// stall sits before the credit and, under the inbox, after the claim: the zombie holds its claim while it stalls,
// as a real slow handler would.
func (cs *consumer) maybeStall(ctx context.Context, id string, seq int) error {
	if cs.cfg.StallEvery <= 0 || seq%cs.cfg.StallEvery != cs.cfg.StallEvery-1 {
		return nil
	}
	var first bool
	err := cs.db.QueryRowContext(ctx, stallSQL, cs.cfg.Run, id, cs.cfg.Name).Scan(&first)
	if errors.Is(err, sql.ErrNoRows) {
		return nil // stalled once already, somewhere
	}
	if err != nil {
		return err
	}
	cs.out.printf("stall %s", id)
	time.Sleep(cs.cfg.StallFor)
	cs.out.printf("resume %s", id)
	return nil
}

// lineWriter serializes report lines from concurrent handlers. The parent reads them as:
//
//	working              the first message of this process reached the handler chain
//	nack <id>            the handler failed and the router nacked
//	deadlock <id>        the failure was PostgreSQL's deadlock detector ending the credit (a nack line follows)
//	skip <id>            the inbox skipped a duplicate
//	stall <id>           a handler began a stall
//	resume <id>          the stall ended and the handler goes on to write
//	crash <id>           the process kills itself after committing <id>, before acking it
//	done <n> <t0> <t1>   n messages handled, the first seen at t0, the nth finished at t1 (unix ns)
//	closed <n>           the router closed gracefully after n messages
type lineWriter struct {
	mu sync.Mutex
	w  *os.File
}

func (l *lineWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", args...)
}

// reportingLogger passes logs through to stderr and turns the inbox's "skipped duplicate" into a report line.
type reportingLogger struct {
	watermill.LoggerAdapter
	out *lineWriter
}

func (l *reportingLogger) Info(msg string, fields watermill.LogFields) {
	if msg == "skipped duplicate" {
		l.out.printf("skip %v", fields["event_id"])
	}
	l.LoggerAdapter.Info(msg, fields)
}

func (l *reportingLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &reportingLogger{LoggerAdapter: l.LoggerAdapter.With(fields), out: l.out}
}

// withAppName sets application_name on a URL-form DSN, so the db-faults run can find and terminate exactly this
// run's backends.
func withAppName(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return dsn + " application_name=" + name
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}
