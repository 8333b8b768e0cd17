package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	wsql4 "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
)

// transportKind names a transport of the matrix.
type transportKind string

const (
	// kafkaTransport is watermill-kafka (Sarama) against kfake, as the other measurements run.
	kafkaTransport transportKind = "kafka"
	// kafkaPgxTransport is kafkaTransport with the consumer on pgx v5: pgxinbox over a pgxpool.Pool, the handler
	// crediting on the pgx.Tx of pgxinbox.TxFromContext.
	kafkaPgxTransport transportKind = "kafka-pgx"
	// amqpTransport is watermill-amqp against RabbitMQ, with its durable-queue config.
	amqpTransport transportKind = "amqp"
	// natsTransport is watermill-nats in JetStream mode, a durable queue consumer with explicit, manual acks.
	natsTransport transportKind = "nats-jetstream"
	// redisTransport is watermill-redisstream: a Redis stream read by a consumer group.
	redisTransport transportKind = "redis-streams"
	// sqlV3Transport is watermill-sql v3's PostgreSQL pub/sub, whose subscriber transaction the inbox joins.
	sqlV3Transport transportKind = "sql-v3"
	// sqlV4Transport is watermill-sql v4's PostgreSQL pub/sub over its database/sql adapter (lib/pq); the inbox joins
	// its subscriber transaction through pgxinbox's v4 joiner.
	sqlV4Transport transportKind = "sql-v4"
	// sqlV4PgxTransport is watermill-sql v4's PostgreSQL subscriber over its pgx adapter (BeginnerFromPgx), the
	// consumer on pgx v5 throughout: pgxinbox.Database joins the subscriber's pgx.Tx, and the handler credits on it.
	sqlV4PgxTransport transportKind = "sql-v4-pgx"
	// goChannel is Watermill's in-process pub/sub: no kills, see runTransportCell.
	goChannel transportKind = "gochannel"
)

// allTransports is the matrix's row order: each pgx cell right after its database/sql twin.
var allTransports = []transportKind{kafkaTransport, kafkaPgxTransport, amqpTransport, natsTransport, redisTransport,
	sqlV3Transport, sqlV4Transport, sqlV4PgxTransport, goChannel}

// overPgx reports whether the cell's consumer reaches PostgreSQL through pgx v5 (a pgxpool.Pool, pgxinbox) instead
// of database/sql. The broker side is its twin's: the harness publishes and counts the same way.
func (k transportKind) overPgx() bool { return k == kafkaPgxTransport || k == sqlV4PgxTransport }

func parseTransport(s string) (transportKind, error) {
	for _, t := range allTransports {
		if string(t) == s {
			return t, nil
		}
	}
	return "", fmt.Errorf("unknown transport %q (want one of %v)", s, allTransports)
}

// Addresses of the services on this machine, and the commands that start them when they are down.
const (
	defaultAMQPURL   = "amqp://guest:guest@127.0.0.1:5672/"
	defaultNATSURL   = "nats://127.0.0.1:4222"
	defaultRedisAddr = "127.0.0.1:6379"

	startRabbitMQ = "rabbitmq-server -detached"
	startNATS     = "start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- " +
		"-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log"
	startRedis = `redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no ` +
		"--dir /var/lib/redis --logfile /var/log/redis/ci.log"
)

// Redelivery settings of the matrix. Each library's default waits far longer before a dead consumer's messages
// go to another (see docs/guides/transports.md); a run with several kills would spend minutes waiting on them.
const (
	// natsAckWait is the JetStream consumer's AckWait (server default 30 s): how long after a delivery the server
	// redelivers a message nobody acked. watermill-nats's AckWaitTimeout, how long it waits for the handler before
	// giving the message up, is set to the same.
	natsAckWait = 2 * time.Second
	// redisMaxIdle is how long a message must sit pending with a consumer before another claims it
	// (watermill-redisstream's MaxIdleTime, default 60 s); redisClaimInterval how often a consumer looks for
	// such messages (ClaimInterval, default 5 s).
	redisMaxIdle       = 2 * time.Second
	redisClaimInterval = 500 * time.Millisecond
)

// transportAddrs are the brokers the matrix runs against.
type transportAddrs struct {
	AMQP, NATS, Redis string
}

// transport is a broker of the matrix as the harness process sees it: it creates a run's queue, publishes to it,
// reads what is left to acknowledge, and removes it.
type transport interface {
	// addr is what a consumer process needs to connect.
	addr() string
	// prepare creates the run's queue, stream or topic before anything is published to it.
	prepare(ctx context.Context, run string) error
	publish(ctx context.Context, run string, msgs []*message.Message) error
	// backlog is how many of the run's messages the broker still holds unacknowledged, as far as it tells.
	backlog(ctx context.Context, run string) (int64, error)
	// remove deletes the run's queue, stream or topic with its consumer state.
	remove(ctx context.Context, run string) error
	close()
}

// openTransport connects to kind's broker. A broker that does not answer is an error that says how to start it.
func openTransport(ctx context.Context, kind transportKind, e *env, a transportAddrs) (transport, error) {
	switch kind {
	case kafkaTransport, kafkaPgxTransport:
		return &kafkaMatrix{e: e}, nil
	case amqpTransport:
		return openAMQP(a.AMQP)
	case natsTransport:
		return openNATS(a.NATS)
	case redisTransport:
		return openRedis(ctx, a.Redis)
	case sqlV3Transport:
		return openSQLV3(e.db)
	case sqlV4Transport, sqlV4PgxTransport:
		return openSQLV4(e.db)
	case goChannel:
		return goChannelMatrix{}, nil
	}
	return nil, fmt.Errorf("no transport %q", kind)
}

// newTransportSubscriber is the consumer process's subscriber for its transport. pool is nil unless the consumer
// runs over pgx.
func newTransportSubscriber(c consumerConfig, db *sql.DB, pool *pgxpool.Pool, logger watermill.LoggerAdapter) (message.Subscriber, error) {
	switch c.Transport {
	case kafkaTransport, kafkaPgxTransport:
		return kafka.NewSubscriber(kafka.SubscriberConfig{
			Brokers:               brokerList(c.Addr),
			Unmarshaler:           kafka.DefaultMarshaler{},
			OverwriteSaramaConfig: saramaConsumerConfig(c),
			ConsumerGroup:         c.Run,
		}, logger)
	case amqpTransport:
		return wamqp.NewSubscriber(wamqp.NewDurableQueueConfig(c.Addr), logger)
	case natsTransport:
		return wnats.NewSubscriber(natsSubscriberConfig(c.Addr, c.Run), logger)
	case redisTransport:
		return redisstream.NewSubscriber(redisstream.SubscriberConfig{
			Client:        redis.NewClient(&redis.Options{Addr: c.Addr}),
			ConsumerGroup: c.Run,
			Consumer:      c.Name,
			MaxIdleTime:   redisMaxIdle,
			ClaimInterval: redisClaimInterval,
		}, logger)
	case sqlV3Transport:
		return wsql.NewSubscriber(db, sqlV3SubscriberConfig(c.Run), logger)
	case sqlV4Transport:
		return wsql4.NewSubscriber(wsql4.BeginnerFromStdSQL(db), sqlV4SubscriberConfig(c.Run), logger)
	case sqlV4PgxTransport:
		return wsql4.NewSubscriber(wsql4.BeginnerFromPgx(pool), sqlV4SubscriberConfig(c.Run), logger)
	}
	return nil, fmt.Errorf("no subscriber for transport %q", c.Transport)
}

// kafkaMatrix is the kfake broker of the env, one 6-partition topic per run keyed by account.
type kafkaMatrix struct{ e *env }

func (k *kafkaMatrix) addr() string { return joinComma(k.e.br.addrs) }
func (k *kafkaMatrix) prepare(_ context.Context, run string) error {
	return k.e.br.createTopic(run, k.e.partitions)
}
func (k *kafkaMatrix) publish(_ context.Context, run string, msgs []*message.Message) error {
	pub, err := newBatchPublisher(k.e.br.addrs)
	if err != nil {
		return err
	}
	defer pub.Close()
	return pub.Publish(run, msgs...)
}
func (k *kafkaMatrix) backlog(_ context.Context, run string) (int64, error) {
	return k.e.br.backlog(run, run)
}
func (k *kafkaMatrix) remove(_ context.Context, run string) error {
	k.e.br.deleteTopic(run)
	return nil
}
func (k *kafkaMatrix) close() {}

// amqpMatrix is RabbitMQ with watermill-amqp's durable-queue config: the default exchange, one durable queue per
// run named after the topic, persistent messages.
type amqpMatrix struct {
	url  string
	conn *amqp091.Connection
	ch   *amqp091.Channel
	pub  *wamqp.Publisher
}

func openAMQP(url string) (*amqpMatrix, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("RabbitMQ at %s does not answer (%v); start it with: %s", url, err, startRabbitMQ)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("RabbitMQ channel: %w", err)
	}
	cfg := wamqp.NewDurableQueueConfig(url)
	// Without confirms a publish returns before the broker has the message; a message lost there would count
	// against the consumer.
	cfg.Publish.ConfirmDelivery = true
	pub, err := wamqp.NewPublisher(cfg, watermill.NopLogger{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("RabbitMQ publisher: %w", err)
	}
	return &amqpMatrix{url: url, conn: conn, ch: ch, pub: pub}, nil
}

func (a *amqpMatrix) addr() string { return a.url }

// prepare declares the queue: watermill-amqp's publisher declares only exchanges, and the default exchange drops a
// message whose routing key names no queue, silently.
func (a *amqpMatrix) prepare(_ context.Context, run string) error {
	_, err := a.ch.QueueDeclare(run, true, false, false, false, nil)
	return err
}
func (a *amqpMatrix) publish(_ context.Context, run string, msgs []*message.Message) error {
	return a.pub.Publish(run, msgs...)
}

// backlog counts the queue's ready messages. RabbitMQ does not count those delivered and not yet acked here; a
// dead consumer's deliveries are ready again as soon as its connection closes, and the matrix reads the backlog
// once more after the last consumer has closed.
func (a *amqpMatrix) backlog(_ context.Context, run string) (int64, error) {
	q, err := a.ch.QueueDeclarePassive(run, true, false, false, false, nil)
	return int64(q.Messages), err
}
func (a *amqpMatrix) remove(_ context.Context, run string) error {
	_, err := a.ch.QueueDelete(run, false, false, false)
	return err
}
func (a *amqpMatrix) close() {
	_ = a.pub.Close()
	_ = a.conn.Close()
}

// natsMatrix is a NATS server with JetStream: one stream per run, its subject the run's name.
type natsMatrix struct {
	url string
	nc  *nats.Conn
	js  nats.JetStreamContext
	pub *wnats.Publisher
}

func openNATS(url string) (*natsMatrix, error) {
	nc, err := nats.Connect(url, nats.Timeout(3*time.Second))
	if err != nil {
		return nil, fmt.Errorf("NATS at %s does not answer (%v); start it with: %s", url, err, startNATS)
	}
	js, err := nc.JetStream()
	if err == nil {
		_, err = js.AccountInfo()
	}
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("NATS at %s has no JetStream (%v); start it with -js: %s", url, err, startNATS)
	}
	pub, err := wnats.NewPublisherWithNatsConn(nc, wnats.PublisherPublishConfig{
		Marshaler: &wnats.NATSMarshaler{}, SubjectCalculator: wnats.DefaultSubjectCalculator,
	}, watermill.NopLogger{})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &natsMatrix{url: url, nc: nc, js: js, pub: pub}, nil
}

// natsSubscriberConfig is the consumer's: a durable queue consumer named after the run, so that a restarted
// process resumes where the dead one left off. ManualAck is the point: without it nats.go acks each message as soon
// as watermill-nats's callback returns, and that callback also returns, without acking, when the handler outlives
// AckWaitTimeout or the subscriber closes; nats.go then acks a message nobody handled (see docs/guides/transports.md).
func natsSubscriberConfig(url, run string) wnats.SubscriberConfig {
	return wnats.SubscriberConfig{
		URL:              url,
		QueueGroupPrefix: run,
		SubscribersCount: 1,
		AckWaitTimeout:   natsAckWait,
		CloseTimeout:     30 * time.Second,
		Unmarshaler:      &wnats.NATSMarshaler{},
		JetStream: wnats.JetStreamConfig{
			DurablePrefix: run,
			SubscribeOptions: []nats.SubOpt{
				nats.ManualAck(), nats.AckExplicit(), nats.AckWait(natsAckWait), nats.DeliverAll(),
			},
		},
	}
}

func (n *natsMatrix) addr() string { return n.url }
func (n *natsMatrix) prepare(_ context.Context, run string) error {
	_, err := n.js.AddStream(&nats.StreamConfig{Name: run, Subjects: []string{run}})
	return err
}
func (n *natsMatrix) publish(_ context.Context, run string, msgs []*message.Message) error {
	return n.pub.Publish(run, msgs...)
}

// backlog is the durable consumer's undelivered plus delivered-but-unacked messages; before the first consumer
// created it, the whole stream.
func (n *natsMatrix) backlog(_ context.Context, run string) (int64, error) {
	ci, err := n.js.ConsumerInfo(run, run)
	if errors.Is(err, nats.ErrConsumerNotFound) {
		si, err := n.js.StreamInfo(run)
		if err != nil {
			return 0, err
		}
		return int64(si.State.Msgs), nil
	}
	if err != nil {
		return 0, err
	}
	return int64(ci.NumPending) + int64(ci.NumAckPending), nil
}
func (n *natsMatrix) remove(_ context.Context, run string) error { return n.js.DeleteStream(run) }
func (n *natsMatrix) close()                                     { n.nc.Close() }

// redisMatrix is a Redis server: one stream per run, read by a consumer group of the same name.
type redisMatrix struct {
	address string
	rc      *redis.Client
	pub     *redisstream.Publisher
}

func openRedis(ctx context.Context, addr string) (*redisMatrix, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rc.Ping(pctx).Err(); err != nil {
		rc.Close()
		return nil, fmt.Errorf("the Redis server at %s does not answer (%v); start it with: %s", addr, err, startRedis)
	}
	pub, err := redisstream.NewPublisher(redisstream.PublisherConfig{Client: rc}, watermill.NopLogger{})
	if err != nil {
		rc.Close()
		return nil, err
	}
	return &redisMatrix{address: addr, rc: rc, pub: pub}, nil
}

func (r *redisMatrix) addr() string { return r.address }

// prepare creates the group at the stream's start, as the subscriber would ("0", its default OldestId), so the
// backlog can be read before the first consumer joins.
func (r *redisMatrix) prepare(ctx context.Context, run string) error {
	return r.rc.XGroupCreateMkStream(ctx, run, run, "0").Err()
}
func (r *redisMatrix) publish(_ context.Context, run string, msgs []*message.Message) error {
	return r.pub.Publish(run, msgs...)
}

// backlog is the group's pending entries (delivered, not acked) plus its lag (not delivered yet).
func (r *redisMatrix) backlog(ctx context.Context, run string) (int64, error) {
	groups, err := r.rc.XInfoGroups(ctx, run).Result()
	if err != nil {
		return 0, err
	}
	for _, g := range groups {
		if g.Name == run {
			return g.Pending + g.Lag, nil
		}
	}
	return 0, fmt.Errorf("stream %s has no group %s", run, run)
}
func (r *redisMatrix) remove(ctx context.Context, run string) error { return r.rc.Del(ctx, run).Err() }
func (r *redisMatrix) close()                                       { _ = r.rc.Close() }

// sqlV3Matrix is watermill-sql v3's PostgreSQL pub/sub in the harness's database: a messages table and an offsets
// table per topic.
type sqlV3Matrix struct {
	db  *sql.DB
	pub *wsql.Publisher
}

func openSQLV3(db *sql.DB) (*sqlV3Matrix, error) {
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	return &sqlV3Matrix{db: db, pub: pub}, nil
}

// sqlV3SubscriberConfig polls every 20 ms instead of every second, so a restarted consumer starts at once.
func sqlV3SubscriberConfig(group string) wsql.SubscriberConfig {
	return wsql.SubscriberConfig{
		ConsumerGroup:    group,
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     20 * time.Millisecond,
		ResendInterval:   20 * time.Millisecond,
		RetryInterval:    20 * time.Millisecond,
	}
}

func (s *sqlV3Matrix) addr() string { return "" }
func (s *sqlV3Matrix) prepare(_ context.Context, run string) error {
	sub, err := wsql.NewSubscriber(s.db, sqlV3SubscriberConfig(run), watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.SubscribeInitialize(run)
}
func (s *sqlV3Matrix) publish(_ context.Context, run string, msgs []*message.Message) error {
	return s.pub.Publish(run, msgs...)
}

// backlog is the topic's highest offset minus the group's acked offset.
func (s *sqlV3Matrix) backlog(ctx context.Context, run string) (int64, error) {
	a := wsql.DefaultPostgreSQLOffsetsAdapter{}
	m := wsql.DefaultPostgreSQLSchema{}
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT coalesce((SELECT max("offset") FROM `+m.MessagesTable(run)+`), 0)
		- coalesce((SELECT offset_acked FROM `+a.MessagesOffsetsTable(run)+` WHERE consumer_group = $1), 0)`, run).Scan(&n)
	return n, err
}
func (s *sqlV3Matrix) remove(ctx context.Context, run string) error {
	a := wsql.DefaultPostgreSQLOffsetsAdapter{}
	m := wsql.DefaultPostgreSQLSchema{}
	_, err := s.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+m.MessagesTable(run)+`, `+a.MessagesOffsetsTable(run))
	return err
}
func (s *sqlV3Matrix) close() { _ = s.pub.Close() }

// sqlV4Matrix is watermill-sql v4's PostgreSQL pub/sub over its database/sql adapter, in the harness's database. It
// serves sql-v4-pgx too: messages are rows whichever adapter wrote them, and only that cell's consumer reads over pgx.
type sqlV4Matrix struct {
	db  *sql.DB
	pub *wsql4.Publisher
}

func openSQLV4(db *sql.DB) (*sqlV4Matrix, error) {
	pub, err := wsql4.NewPublisher(wsql4.BeginnerFromStdSQL(db),
		wsql4.PublisherConfig{SchemaAdapter: wsql4.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true}, watermill.NopLogger{})
	if err != nil {
		return nil, err
	}
	return &sqlV4Matrix{db: db, pub: pub}, nil
}

// sqlV4AckDeadline is how long v4's subscriber waits for a message's ack before it gives the message up (v4's
// default, spelled out). When it passes, v4 ends its transaction from its own goroutine; over pgx nothing orders
// that after the handler's statements on the same pgx.Tx, so it must stay above the longest handler, which
// the consume command checks.
const sqlV4AckDeadline = 30 * time.Second

// sqlV4SubscriberConfig polls every 20 ms, as sqlV3SubscriberConfig does.
func sqlV4SubscriberConfig(group string) wsql4.SubscriberConfig {
	ackDeadline := sqlV4AckDeadline
	return wsql4.SubscriberConfig{
		ConsumerGroup:    group,
		AckDeadline:      &ackDeadline,
		SchemaAdapter:    wsql4.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wsql4.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
		PollInterval:     20 * time.Millisecond,
		ResendInterval:   20 * time.Millisecond,
		RetryInterval:    20 * time.Millisecond,
	}
}

func (s *sqlV4Matrix) addr() string { return "" }
func (s *sqlV4Matrix) prepare(_ context.Context, run string) error {
	sub, err := wsql4.NewSubscriber(wsql4.BeginnerFromStdSQL(s.db), sqlV4SubscriberConfig(run), watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer sub.Close()
	return sub.SubscribeInitialize(run)
}
func (s *sqlV4Matrix) publish(_ context.Context, run string, msgs []*message.Message) error {
	return s.pub.Publish(run, msgs...)
}

// backlog is the topic's highest offset minus the group's acked offset.
func (s *sqlV4Matrix) backlog(ctx context.Context, run string) (int64, error) {
	a := wsql4.DefaultPostgreSQLOffsetsAdapter{}
	m := wsql4.DefaultPostgreSQLSchema{}
	var n int64
	err := s.db.QueryRowContext(ctx, `SELECT coalesce((SELECT max("offset") FROM `+m.MessagesTable(run)+`), 0)
		- coalesce((SELECT offset_acked FROM `+a.MessagesOffsetsTable(run)+` WHERE consumer_group = $1), 0)`, run).Scan(&n)
	return n, err
}
func (s *sqlV4Matrix) remove(ctx context.Context, run string) error {
	a := wsql4.DefaultPostgreSQLOffsetsAdapter{}
	m := wsql4.DefaultPostgreSQLSchema{}
	_, err := s.db.ExecContext(ctx, `DROP TABLE IF EXISTS `+m.MessagesTable(run)+`, `+a.MessagesOffsetsTable(run))
	return err
}
func (s *sqlV4Matrix) close() { _ = s.pub.Close() }

// goChannelMatrix has no broker: the consumer process publishes to itself, from a file the harness writes.
type goChannelMatrix struct{}

func (goChannelMatrix) addr() string                                              { return "" }
func (goChannelMatrix) prepare(context.Context, string) error                     { return nil }
func (goChannelMatrix) publish(context.Context, string, []*message.Message) error { return nil }
func (goChannelMatrix) backlog(context.Context, string) (int64, error)            { return 0, nil }
func (goChannelMatrix) remove(context.Context, string) error                      { return nil }
func (goChannelMatrix) close()                                                    {}

// parseTransports parses a comma-separated list of transports.
func parseTransports(s string) ([]transportKind, error) {
	var out []transportKind
	for _, f := range strings.Split(s, ",") {
		t, err := parseTransport(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
