package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql4 "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// transportConsumerConfig is the command line of `harness consume-transport`: one consumer process of one cell of
// the transport matrix.
type transportConsumerConfig struct {
	Transport transportKind
	Addr      string // the broker's address in the transport's own form; unused by sql-v3 and gochannel
	Variant   variant
	Run       string // the run's consumer group, stream consumer, inbox consumer and ledger scope
	Topic     string // the topic, queue or stream read; empty: Run
	Name      string
	DSN       string
	Sleep     time.Duration
	Pool      int
	Messages  string // gochannel only: a file of the messages this process publishes to itself
	Expect    int    // print a "done" line after this many successful handlings (0: never)
	// InFlight is how many messages the consumer handles at once, where the transport lets the consumer say: for
	// gochannel, that many topics, each with a handler and a publisher that waits for each message's ack (0: one
	// topic, and every message at once); for amqp, that many subscriptions of the queue, each a channel with a
	// prefetch of one, since watermill-amqp hands a subscription's next message over only after the last one's
	// ack (0 or 1: one). Kafka's is the partitions the consumer owns.
	InFlight int
	Batch    batchConfig // batch variants only
}

func (c transportConsumerConfig) topic() string { return cmp.Or(c.Topic, c.Run) }

// subscriptions returns the topic of each handler the consumer runs: InFlight of them where InFlight sets the
// messages in flight (see InFlight), one otherwise. amqp's subscriptions of one queue compete for its messages;
// gochannel's are of topics of their own.
func (c transportConsumerConfig) subscriptions() []string {
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

func (c transportConsumerConfig) args() []string {
	return append([]string{"consume-transport",
		"--transport", string(c.Transport), "--addr", c.Addr,
		"--variant", string(c.Variant), "--run", c.Run, "--name", c.Name,
		"--dsn", c.DSN, "--sleep", c.Sleep.String(), "--pool", fmt.Sprint(c.Pool),
		"--messages", c.Messages, "--expect", fmt.Sprint(c.Expect),
		"--topic", c.Topic, "--in-flight", fmt.Sprint(c.InFlight),
	}, c.Batch.args()...)
}

func consumeTransportCommand(args []string) error {
	fs := flag.NewFlagSet("consume-transport", flag.ExitOnError)
	var c transportConsumerConfig
	var kind, v string
	fs.StringVar(&kind, "transport", "", "transport of the cell")
	fs.StringVar(&c.Addr, "addr", "", "broker address")
	fs.StringVar(&v, "variant", string(inboxVariant), "inbox, after-db, batch, batch-pgx or inbox-atcommit")
	fs.StringVar(&c.Run, "run", "", "run ID")
	fs.StringVar(&c.Name, "name", "consumer", "this consumer's name")
	fs.StringVar(&c.DSN, "dsn", defaultDSN, "PostgreSQL DSN")
	fs.DurationVar(&c.Sleep, "sleep", 5*time.Millisecond, "handler work per message")
	fs.IntVar(&c.Pool, "pool", defaultPool, "database connections")
	fs.StringVar(&c.Messages, "messages", "", "gochannel: file of messages to publish")
	fs.IntVar(&c.Expect, "expect", 0, "report a \"done\" line after this many messages (0: never)")
	fs.StringVar(&c.Topic, "topic", "", "topic, queue or stream to read (default: --run)")
	fs.IntVar(&c.InFlight, "in-flight", 0, "gochannel and amqp: messages handled at once (0: the transport's own way)")
	c.Batch.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.Transport, err = parseTransport(kind); err != nil {
		return err
	}
	if c.Variant, err = parseVariant(v); err != nil {
		return err
	}
	if c.Variant == afterDBSync && c.Transport != kafkaTransport {
		return fmt.Errorf("consume-transport: %s commits Kafka offsets on every ack; it runs over kafka only", c.Variant)
	}
	if c.Run == "" {
		return errors.New("consume-transport: --run is required")
	}
	if c.Transport == sqlV4PgxTransport && c.Sleep >= sqlV4AckDeadline/2 {
		// Over pgx, v4 ends a given-up message's transaction while the handler may still run statements on it.
		return fmt.Errorf("consume-transport: --sleep %s leaves too little of watermill-sql v4's ack deadline (%s) over pgx", c.Sleep, sqlV4AckDeadline)
	}
	return consumeTransport(c)
}

// consumeTransport runs the same router, handler and middleware as the Kafka consumer over the cell's transport,
// until SIGTERM.
func consumeTransport(c transportConsumerConfig) error {
	out := &lineWriter{w: os.Stdout}
	logger := &reportingLogger{LoggerAdapter: watermill.NewStdLoggerWithOut(os.Stderr, false, false), out: out}
	db, pool, err := openConsumerDB(c)
	if err != nil {
		return err
	}
	if pool != nil {
		defer pool.Close()
	} else {
		defer db.Close()
	}

	if err := warmPool(db, pool, c.Pool); err != nil {
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
	} else if sub, err = newTransportSubscriber(c, db, pool, logger); err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Minute}, logger)
	if err != nil {
		return err
	}
	cons := &consumer{cfg: consumerConfig{Variant: c.Variant, Run: c.Run, Name: c.Name, Sleep: c.Sleep, Expect: c.Expect},
		db: db, pgx: pool, joinsV4: c.Transport == sqlV4PgxTransport, out: out}
	var ib *inbox.Inbox
	opts := []inbox.Option{inbox.WithTable(inboxTable), inbox.WithConsumer(c.Run), inbox.WithLogger(logger)}
	if c.Variant.batched() {
		opts = append(opts, c.Batch.options()...)
	}
	if c.Variant == atCommitVariant {
		opts = append(opts, inbox.WithClaimAtCommit())
	}
	switch {
	case c.Variant.usesInbox() && pool != nil:
		// pgxinbox over the pool; its Database joins the transaction of watermill-sql v4's subscriber by default.
		ib, err = pgxinbox.New(pool, opts...)
	case c.Variant.usesInbox():
		// The inbox joins the subscriber transaction of watermill-sql v3 or v4, whichever the message carries.
		ib, err = inbox.On(driver.StdSQL(db), inbox.SQLv3Joiner(), pgxinbox.SQLv4Joiner()).New(opts...)
	}
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

// openConsumerDB opens the consumer's database: a pgxpool.Pool in a pgx cell or variant, a *sql.DB over lib/pq in
// the others, either capped at c.Pool connections and named after the run (application_name).
func openConsumerDB(c transportConsumerConfig) (*sql.DB, *pgxpool.Pool, error) {
	dsn := withAppName(c.DSN, c.Run)
	if !c.Transport.overPgx() && c.Variant != batchPgxVariant && c.Variant != atCommitVariant {
		db, err := sql.Open("postgres", dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("open %s: %w", c.DSN, err)
		}
		db.SetMaxOpenConns(c.Pool)
		db.SetMaxIdleConns(c.Pool)
		return db, nil, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s for pgx: %w", c.DSN, err)
	}
	cfg.MaxConns = int32(c.Pool)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("pgx pool on %s: %w", c.DSN, err)
	}
	return nil, pool, nil
}

// warmPool opens n connections before the first message, so that no measured message waits for a connection to be
// set up: a throughput measurement at 64 in flight would otherwise count 64 backend start-ups.
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

// fileMessage is one line of the file a gochannel consumer publishes from.
type fileMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata"`
	Payload  []byte            `json:"payload"`
}

func writeMessagesFile(path string, msgs []*message.Message) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, m := range msgs {
		if err := enc.Encode(fileMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// publishFromFile publishes every message of path, one Publish call each. Unpaced, it publishes to the one topic
// it is given from one goroutine, and GoChannel hands each message to its subscriber on a goroutine of its own, so
// the router runs as many handlers at once as messages are waiting, and a republished copy races its original
// through the inbox. Paced, over a GoChannel that blocks each Publish until the ack, one goroutine per topic
// publishes to its topic whichever message is next, and so each topic has one message in flight at any time.
func publishFromFile(pub message.Publisher, topics []string, path string, paced bool) error {
	msgs, err := readMessagesFile(path)
	if err != nil {
		return err
	}
	if !paced {
		for _, m := range msgs {
			if err := pub.Publish(topics[0], m); err != nil {
				return err
			}
		}
		return nil
	}
	var next atomic.Int64
	errs := make(chan error, len(topics))
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= len(msgs) {
					return
				}
				if err := pub.Publish(topic, msgs[n]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// readMessagesFile reads the whole file first, so that publishing is not paced by the disk.
func readMessagesFile(path string) ([]*message.Message, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReader(f))
	var msgs []*message.Message
	for {
		var fm fileMessage
		if err := dec.Decode(&fm); errors.Is(err, io.EOF) {
			return msgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		m := message.NewMessage(fm.UUID, fm.Payload)
		for k, v := range fm.Metadata {
			m.Metadata.Set(k, v)
		}
		msgs = append(msgs, m)
	}
}
