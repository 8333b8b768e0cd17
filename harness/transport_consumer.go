package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql4 "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
	"github.com/effectively-once/watermill-inbox/sqlv3inbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// transportConsumerConfig is the command line of `harness consume-transport`: one consumer process of one cell of
// the transport matrix.
type transportConsumerConfig struct {
	Transport transportKind
	Addr      string // the broker's address in the transport's own form; unused by sql-v3 and gochannel
	Variant   variant
	Run       string // the run's topic, queue, stream, consumer group and inbox consumer, all one name
	Name      string
	DSN       string
	Sleep     time.Duration
	Pool      int
	Messages  string // gochannel only: a file of the messages this process publishes to itself
	Expect    int    // print a "done" line after this many successful handlings (0: never)
}

func (c transportConsumerConfig) args() []string {
	return []string{"consume-transport",
		"--transport", string(c.Transport), "--addr", c.Addr,
		"--variant", string(c.Variant), "--run", c.Run, "--name", c.Name,
		"--dsn", c.DSN, "--sleep", c.Sleep.String(), "--pool", fmt.Sprint(c.Pool),
		"--messages", c.Messages, "--expect", fmt.Sprint(c.Expect),
	}
}

func consumeTransportCommand(args []string) error {
	fs := flag.NewFlagSet("consume-transport", flag.ExitOnError)
	var c transportConsumerConfig
	var kind, v string
	fs.StringVar(&kind, "transport", "", "transport of the cell")
	fs.StringVar(&c.Addr, "addr", "", "broker address")
	fs.StringVar(&v, "variant", string(inboxVariant), "inbox or after-db")
	fs.StringVar(&c.Run, "run", "", "run ID")
	fs.StringVar(&c.Name, "name", "consumer", "this consumer's name")
	fs.StringVar(&c.DSN, "dsn", defaultDSN, "PostgreSQL DSN")
	fs.DurationVar(&c.Sleep, "sleep", 5*time.Millisecond, "handler work per message")
	fs.IntVar(&c.Pool, "pool", defaultPool, "database connections")
	fs.StringVar(&c.Messages, "messages", "", "gochannel: file of messages to publish")
	fs.IntVar(&c.Expect, "expect", 0, "report a \"done\" line after this many messages (0: never)")
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
	if c.Variant != inboxVariant && c.Variant != afterDB {
		return fmt.Errorf("consume-transport: variant %s is not one of the matrix (inbox, after-db)", c.Variant)
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

	var goch *gochannel.GoChannel
	var sub message.Subscriber
	if c.Transport == goChannel {
		// The messages must go out after the router subscribed: a GoChannel drops what nobody listens to.
		goch = gochannel.NewGoChannel(gochannel.Config{}, logger)
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
	h := router.AddConsumerHandler("credit", c.Run, sub, cons.credit)
	h.AddMiddleware(cons.report)
	if c.Variant == inboxVariant && pool != nil {
		// pgxinbox over the pool; its Database joins the transaction of watermill-sql v4's subscriber by default.
		ib, err := pgxinbox.New(pool, inbox.WithTable(inboxTable), inbox.WithConsumer(c.Run), inbox.WithLogger(logger))
		if err != nil {
			return err
		}
		h.AddMiddleware(ib.Middleware)
	} else if c.Variant == inboxVariant {
		// The inbox joins the subscriber transaction of watermill-sql v3 or v4, whichever the message carries.
		d := inbox.On(driver.StdSQL(db), sqlv3inbox.Joiner(), pgxinbox.SQLv4Joiner())
		ib, err := d.New(inbox.WithTable(inboxTable), inbox.WithConsumer(c.Run), inbox.WithLogger(logger))
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
	if goch != nil {
		go func() {
			<-router.Running()
			if err := publishFromFile(goch, c.Run, c.Messages); err != nil {
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

// openConsumerDB opens the consumer's database: a pgxpool.Pool in a pgx cell, a *sql.DB over lib/pq in the others,
// either capped at c.Pool connections and named after the run (application_name).
func openConsumerDB(c transportConsumerConfig) (*sql.DB, *pgxpool.Pool, error) {
	dsn := withAppName(c.DSN, c.Run)
	if !c.Transport.overPgx() {
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

// creditPgx writes a credit through pgx v5. Under the inbox it runs on pgxinbox's pgx.Tx, which must be there (a
// handler that fell back to a transaction of its own would credit outside the claim's, and prove nothing); in
// sql-v4-pgx that pgx.Tx must also be the subscriber's, or the inbox did not join it. Without the inbox it commits a
// transaction of its own on the pool, as the database/sql cells do on theirs.
func (cs *consumer) creditPgx(ctx context.Context, args []any) error {
	if cs.cfg.Variant != inboxVariant {
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

// publishFromFile publishes every message of path, one Publish call each: GoChannel hands each message to its
// subscriber on a goroutine of its own, so the router runs as many handlers at once as messages are waiting, and
// a republished copy races its original through the inbox.
func publishFromFile(pub message.Publisher, topic, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var fm fileMessage
		if err := dec.Decode(&fm); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		m := message.NewMessage(fm.UUID, fm.Payload)
		for k, v := range fm.Metadata {
			m.Metadata.Set(k, v)
		}
		if err := pub.Publish(topic, m); err != nil {
			return err
		}
	}
}
