package main

import (
	"cmp"
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
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wsql4 "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
)

// consumerConfig is everything a consumer subprocess (`harness consume`) is told on its command line: one consumer
// of a kill, zombie, db-faults or throughput run, or of one cell of the transport matrix.
type consumerConfig struct {
	Transport transportKind
	Addr      string // the broker's address in the transport's own form (kafka: host:port, comma-separated); unused by sql-v3, sql-v4 and gochannel
	Variant   variant
	Run       string // the run's consumer group, stream consumer, inbox consumer and ledger scope
	Topic     string // the topic, queue or stream read; empty: Run
	Name      string // this process: its Kafka client ID, its stream consumer, and the consumer column of its ledger rows
	DSN       string
	Sleep     time.Duration
	Pool      int // database connections, all opened before the first message
	// Session, Heartbeat and Rebalance are the Kafka consumer group's timeouts.
	Session          time.Duration
	Heartbeat        time.Duration
	Rebalance        time.Duration
	CrashAfterCommit int           // SIGKILL self right after the Nth successful handling, before the ack
	StallEvery       int           // stall the first handling of every message whose seq % StallEvery == StallEvery-1
	StallFor         time.Duration // how long a stall lasts
	Expect           int           // print a "done" line after this many successful handlings
	Messages         string        // gochannel only: a file of the messages this process publishes to itself
	// InFlight is how many messages the consumer handles at once, where the transport lets the consumer say: for
	// gochannel, that many topics, each with a handler and a publisher that waits for each message's ack (0: one
	// topic, and every message at once); for amqp, that many subscriptions of the queue, each a channel with a
	// prefetch of one, since watermill-amqp hands a subscription's next message over only after the last one's
	// ack (0 or 1: one). Kafka's is the partitions the consumer owns.
	InFlight int
	Batch    batchConfig // batch variants only
}

func (c consumerConfig) topic() string { return cmp.Or(c.Topic, c.Run) }

// overPgx reports whether the consumer reaches PostgreSQL through pgx v5 (a pgxpool.Pool, pgxinbox) instead of
// database/sql: in a pgx cell of the matrix, or in a pgx variant over any transport.
func (c consumerConfig) overPgx() bool {
	return c.Transport.overPgx() || c.Variant == batchPgxVariant || c.Variant == atCommitVariant
}

// subscriptions returns the topic of each handler the consumer runs: InFlight of them where InFlight sets the
// messages in flight (see InFlight), one otherwise. amqp's subscriptions of one queue compete for its messages;
// gochannel's are of topics of their own.
func (c consumerConfig) subscriptions() []string {
	switch {
	case c.Transport == amqpTransport && c.InFlight > 1:
		return slices.Repeat([]string{c.topic()}, c.InFlight)
	case c.Transport == goChannel && c.InFlight > 0:
		topics := make([]string, c.InFlight)
		for n := range topics {
			topics[n] = fmt.Sprintf("%s-%d", c.topic(), n+1)
		}
		return topics
	}
	return []string{c.topic()}
}

// args renders c as the command line of `harness consume`.
func (c consumerConfig) args() []string {
	return append([]string{"consume",
		"--transport", string(c.Transport), "--addr", c.Addr,
		"--variant", string(c.Variant), "--run", c.Run, "--topic", c.Topic, "--name", c.Name,
		"--dsn", c.DSN, "--sleep", c.Sleep.String(), "--pool", fmt.Sprint(c.Pool),
		"--session-timeout", c.Session.String(),
		"--heartbeat", c.Heartbeat.String(),
		"--rebalance-timeout", c.Rebalance.String(),
		"--crash-after-commit-of", fmt.Sprint(c.CrashAfterCommit),
		"--stall-every", fmt.Sprint(c.StallEvery),
		"--stall-for", c.StallFor.String(),
		"--expect", fmt.Sprint(c.Expect),
		"--messages", c.Messages,
		"--in-flight", fmt.Sprint(c.InFlight),
	}, c.Batch.args()...)
}

func consumeCommand(args []string) error {
	c, err := parseConsumerConfig(args)
	if err != nil {
		return err
	}
	return consume(c)
}

// parseConsumerConfig reads the command line that consumerConfig.args renders, without its first word.
func parseConsumerConfig(args []string) (consumerConfig, error) {
	fs := flag.NewFlagSet("consume", flag.ContinueOnError)
	var c consumerConfig
	var kind, v string
	fs.StringVar(&kind, "transport", string(kafkaTransport), "transport to consume from")
	fs.StringVar(&c.Addr, "addr", "", "broker address (kafka: host:port, comma-separated)")
	fs.StringVar(&v, "variant", string(inboxVariant), "how the consumer orders its ack and its commit; see the kill command")
	fs.StringVar(&c.Run, "run", "", "run ID")
	fs.StringVar(&c.Topic, "topic", "", "topic, queue or stream to read (default: --run)")
	fs.StringVar(&c.Name, "name", "consumer", "this consumer's name")
	fs.StringVar(&c.DSN, "dsn", defaultDSN, "PostgreSQL DSN")
	fs.DurationVar(&c.Sleep, "sleep", 10*time.Millisecond, "handler work per message")
	fs.IntVar(&c.Pool, "pool", defaultPool, "database connections")
	fs.DurationVar(&c.Session, "session-timeout", defaultSession, "kafka: group session timeout")
	fs.DurationVar(&c.Heartbeat, "heartbeat", defaultHeartbeat, "kafka: group heartbeat interval")
	fs.DurationVar(&c.Rebalance, "rebalance-timeout", defaultRebalance, "kafka: group rebalance timeout")
	fs.IntVar(&c.CrashAfterCommit, "crash-after-commit-of", 0, "SIGKILL itself after the Nth commit, before its ack (0: never)")
	fs.IntVar(&c.StallEvery, "stall-every", 0, "stall one message in this many, the first time it is handled (0: never)")
	fs.DurationVar(&c.StallFor, "stall-for", 0, "how long a stall lasts")
	fs.IntVar(&c.Expect, "expect", 0, "report a \"done\" line after this many messages (0: never)")
	fs.StringVar(&c.Messages, "messages", "", "gochannel: file of messages to publish")
	fs.IntVar(&c.InFlight, "in-flight", 0, "gochannel and amqp: messages handled at once (0: the transport's own way)")
	c.Batch.register(fs)
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.Transport, err = parseTransport(kind); err != nil {
		return c, err
	}
	if c.Variant, err = parseVariant(v); err != nil {
		return c, err
	}
	switch {
	case c.Run == "":
		return c, errors.New("consume: --run is required")
	case c.Addr == "" && (c.Transport == kafkaTransport || c.Transport == kafkaPgxTransport):
		return c, errors.New("consume: --addr is required over kafka")
	case c.Variant == afterDBSync && c.Transport != kafkaTransport:
		return c, fmt.Errorf("consume: %s commits Kafka offsets on every ack; it runs over kafka only", c.Variant)
	case c.Transport == sqlV4PgxTransport && c.Sleep >= sqlV4AckDeadline/2:
		// Over pgx, v4 ends a given-up message's transaction while the handler may still run statements on it.
		return c, fmt.Errorf("consume: --sleep %s leaves too little of watermill-sql v4's ack deadline (%s) over pgx", c.Sleep, sqlV4AckDeadline)
	}
	return c, nil
}

// consumer is the state of one consumer process.
type consumer struct {
	cfg consumerConfig
	// db serves the stall bookkeeping always, and the credit and the inbox unless pgx is set.
	db *sql.DB
	// pgx, when set, is the database of the credit and the inbox: the handler credits through pgx v5 (see
	// creditPgx), and joinsV4 says the message comes with watermill-sql v4's pgx transaction, which the inbox must
	// have joined.
	pgx     *pgxpool.Pool
	joinsV4 bool
	out     *lineWriter
	handled atomic.Int64
	first   atomic.Int64 // unix ns of the first message, for throughput
	working sync.Once
}

// consume runs a Watermill router over the consumer's transport until SIGTERM: the same handler and middleware
// for every transport and variant, one handler per subscription. It reports on stdout, one line per fact the
// parent counts (see lineWriter); logs go to stderr.
func consume(c consumerConfig) error {
	out := &lineWriter{w: os.Stdout}
	sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	logger := &reportingLogger{LoggerAdapter: watermill.NewStdLoggerWithOut(os.Stderr, false, false), out: out}
	cons := &consumer{cfg: c, out: out, joinsV4: c.Transport == sqlV4PgxTransport}
	var err error
	if cons.db, cons.pgx, err = openConsumerDB(c); err != nil {
		return err
	}
	defer cons.db.Close()
	if cons.pgx != nil {
		defer cons.pgx.Close()
	}
	if err := warmPool(cons.db, cons.pgx, c.Pool); err != nil {
		return err
	}

	var goch *gochannel.GoChannel
	var sub message.Subscriber
	if c.Transport == goChannel {
		// The messages must go out after the router subscribed: a GoChannel drops what nobody listens to. With
		// InFlight, each Publish waits for its message's ack; GoChannel holds a topic's lock while it waits, so
		// one topic has one message in flight, and InFlight topics have InFlight.
		goch = gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: c.InFlight > 0}, logger)
		sub = goch
	} else if sub, err = newTransportSubscriber(c, cons.db, cons.pgx, logger); err != nil {
		return err
	}
	ib, err := newConsumerInbox(c, cons.db, cons.pgx, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Minute}, logger)
	if err != nil {
		return err
	}
	// One handler per subscription. They share the inbox, and so its batches, as the partitions of one Kafka
	// consumer do.
	topics := c.subscriptions()
	for n, topic := range topics {
		name := "credit"
		if len(topics) > 1 {
			name = fmt.Sprintf("credit-%d", n+1)
		}
		h := router.AddConsumerHandler(name, topic, sub, cons.credit)
		// First added runs outermost: the report sees a message before the variant acks it, and after the inbox
		// committed it, which is where a crash between commit and ack has to land.
		h.AddMiddleware(cons.report)
		if c.Variant == atMostOnce {
			h.AddMiddleware(middleware.InstantAck)
		}
		if ib != nil {
			h.AddMiddleware(ib.Middleware)
		}
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		_ = router.Close()
	}()
	if goch != nil {
		go func() {
			<-router.Running()
			if err := publishFromFile(goch, topics, c.Messages, c.InFlight > 0); err != nil {
				out.printf("error %v", err)
				_ = router.Close()
			}
		}()
	}
	if err := router.Run(context.Background()); err != nil {
		return err
	}
	out.printf("closed %d", cons.handled.Load())
	return nil
}

// openConsumerDB opens the consumer's databases, capped at c.Pool connections each and named after the run
// (application_name, which db-faults terminates by): a *sql.DB over lib/pq always, and a pgxpool.Pool as well when
// the consumer runs over pgx. sql.Open connects lazily, so a pgx consumer that never stalls never opens the first.
// The cap matters most for at-most-once, whose InstantAck lets the router start a handler for every message at
// once: unbounded, they would exhaust the server's connections.
func openConsumerDB(c consumerConfig) (*sql.DB, *pgxpool.Pool, error) {
	dsn := withAppName(c.DSN, c.Run)
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", c.DSN, err)
	}
	db.SetMaxOpenConns(c.Pool)
	db.SetMaxIdleConns(c.Pool)
	if !c.overPgx() {
		return db, nil, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("parse %s for pgx: %w", c.DSN, err)
	}
	cfg.MaxConns = int32(c.Pool)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("pgx pool on %s: %w", c.DSN, err)
	}
	return db, pool, nil
}

// warmPool opens n connections of the database the handler uses before the first message, so that no measured
// message waits for a connection to be set up: a throughput measurement at 64 in flight would otherwise count 64
// backend start-ups.
func warmPool(db *sql.DB, pool *pgxpool.Pool, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if pool != nil {
		conns := make([]*pgxpool.Conn, 0, n)
		defer func() {
			for _, c := range conns {
				c.Release()
			}
		}()
		for range n {
			c, err := pool.Acquire(ctx)
			if err != nil {
				return fmt.Errorf("warm the pgx pool: %w", err)
			}
			conns = append(conns, c)
		}
		return nil
	}
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close() // back to the pool, which keeps up to n idle
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("warm the connection pool: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

// newConsumerInbox builds the variant's inbox, or returns nil for a variant without one. Over pgx it is pgxinbox on
// the pool, whose Database joins watermill-sql v4's pgx subscriber transaction by default; over database/sql it
// joins the subscriber transaction of watermill-sql v3 or v4, whichever the message carries. Messages of the other
// transports carry none, and the inbox begins its own.
func newConsumerInbox(c consumerConfig, db *sql.DB, pool *pgxpool.Pool, logger watermill.LoggerAdapter) (*inbox.Inbox, error) {
	if !c.Variant.usesInbox() {
		return nil, nil
	}
	opts := []inbox.Option{inbox.WithTable(c.Variant.table()), inbox.WithConsumer(c.Run), inbox.WithLogger(logger)}
	switch c.Variant {
	case batchVariant, batchPgxVariant:
		opts = append(opts, c.Batch.options()...)
	case atCommitVariant:
		opts = append(opts, inbox.WithClaimAtCommit())
	case partitionedVariant:
		opts = append(opts, inbox.WithIDType(inbox.IDTypeUUID))
	}
	if pool != nil {
		return pgxinbox.New(pool, opts...)
	}
	return inbox.On(driver.StdSQL(db), inbox.SQLv3Joiner(), pgxinbox.SQLv4Joiner()).New(opts...)
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
// database/sql or, in the pgx cells and variants, pgx.
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

// creditPgx writes a credit through pgx v5. Under the inbox it runs on pgxinbox's pgx.Tx, which must be there (a
// handler that fell back to a transaction of its own would credit outside the claim's, and prove nothing); in
// sql-v4-pgx that pgx.Tx must also be the subscriber's, or the inbox did not join it. Without the inbox it commits a
// transaction of its own on the pool, as the database/sql cells do on theirs.
func (cs *consumer) creditPgx(ctx context.Context, args []any) error {
	if !cs.cfg.Variant.usesInbox() {
		return pgx.BeginFunc(ctx, cs.pgx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, creditSQL, args...)
			return err
		})
	}
	tx, ok := pgxinbox.TxFromContext(ctx)
	if !ok {
		return errors.New("credit: the inbox put no pgx.Tx in the message's context")
	}
	if cs.joinsV4 {
		sub, _ := wsql4.TxFromContext(ctx)
		if p, ok := sub.(*wsql4.PgxTx); !ok || p.Tx != tx {
			return fmt.Errorf("credit: the inbox's pgx.Tx is not watermill-sql v4's subscriber's (%T): it did not join", sub)
		}
	}
	_, err := tx.Exec(ctx, creditSQL, args...)
	return err
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
