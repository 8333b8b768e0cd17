package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	inbox "github.com/effectively-once/watermill-inbox"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// throughputConfig is one `harness throughput` invocation.
type throughputConfig struct {
	Transports []transportKind // kafka, gochannel, amqp: where the consumer gets its messages
	Variants   []variant       // how it applies them
	InFlight   []int           // messages the consumer handles at once; each is a row of the tables
	Sleeps     []time.Duration // handler work per message, before its first statement; each gets its own tables
	Runs       int             // rounds
	PerSlot    int             // messages per measurement for each message in flight...
	Messages   int             // ...and no more than this many
	Ceiling    bool            // measure the PostgreSQL-only ceiling beside the consumers
	Pool       int             // database connections of each consumer and of the ceiling; 0: one per message in flight
	Batch      batchConfig     // the batch variants' settings
	Accounts   int             // for the report: accounts the credits are spread over
	Seed       uint64          // seed of the events
	Timeout    time.Duration   // how long one measurement may take
	AMQP       string          // RabbitMQ URL
	transports map[transportKind]transport
}

// messages is how many messages a measurement at inFlight handles: enough per message in flight that the
// measurement is not over before it is under way, capped so that the widest rows do not take all the time.
func (c throughputConfig) messages(inFlight int) int {
	return min(c.Messages, max(1, c.PerSlot*inFlight))
}

// pool is the connection pool of a consumer, and of the ceiling, at inFlight: by default one connection per message
// in flight, as pgbench opens one per client, so that no variant waits for a connection the others do not need.
func (c throughputConfig) pool(inFlight int) int {
	if c.Pool > 0 {
		return c.Pool
	}
	return inFlight
}

// throughputResult is one measurement: one transport and variant (or the ceiling), one handler sleep, one number
// of messages in flight, one round.
type throughputResult struct {
	Transport transportKind // empty for the ceiling, which has none
	Name      string        // a variant, or "ceiling"
	InFlight  int
	Sleep     time.Duration
	Round     int
	Messages  int
	MsgPerS   float64
	Nacks     int // handlings that failed and were redelivered
	Deadlocks int // of them, ended by PostgreSQL's deadlock detector
	Commits   int // transactions that claimed the messages in the inbox (0 without the inbox)
}

const ceilingName = "ceiling"

// throughputTransports are the transports the measurement runs over unless told otherwise: each lets the consumer
// say how many messages it handles at once. The pgx consumer is a variant over them (batch-pgx), not a transport.
var throughputTransports = []transportKind{kafkaTransport, goChannel, amqpTransport}

// kafka-pgx, on request, is Kafka with every variant's consumer on pgx v5 (the inbox through pgxinbox): per-message
// and batch mode on the same driver. It reads the kafka transport's topic, under groups of its own.

// validThroughputVariant reports why v cannot run over kind, if it cannot.
func validThroughputVariant(kind transportKind, v variant) error {
	switch {
	case !slices.Contains(throughputTransports, kind) && kind != kafkaPgxTransport:
		return fmt.Errorf("the throughput measurement runs over %v and %s, not %s", throughputTransports, kafkaPgxTransport, kind)
	case v == afterDBSync && kind != kafkaTransport:
		return fmt.Errorf("%s commits Kafka offsets on every ack: it runs over kafka only", v)
	case v == atMostOnce:
		return fmt.Errorf("%s acks before the handler runs, so nothing bounds its messages in flight: it has no place in this measurement", v)
	}
	return nil
}

// throughputGroup is the messages of one round at one in-flight count and one handler sleep, published once to
// every transport, and what each measurement reads them from.
type throughputGroup struct {
	name     string
	round    int
	inFlight int
	sleep    time.Duration
	n        int
	file     string // gochannel: the messages, for the consumer to publish to itself
}

// runThroughput measures in rounds. A round publishes, for each number of messages in flight and each handler
// sleep, one batch of messages to every transport, and has every transport and variant consume it, and the
// ceiling run it, in an order that moves from round to round, so that no variant always runs first (cold caches)
// or last (a table bloated by the others' rows).
func runThroughput(ctx context.Context, e *env, c throughputConfig) ([]throughputResult, error) {
	c.transports = map[transportKind]transport{}
	defer func() {
		for _, tr := range c.transports {
			tr.close()
		}
	}()
	for _, kind := range c.Transports {
		tr, err := openTransport(ctx, kind, e, transportAddrs{AMQP: c.AMQP})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kind, err)
		}
		c.transports[kind] = tr
	}
	var results []throughputResult
	for r := range c.Runs {
		for _, inFlight := range c.InFlight {
			for _, sleep := range c.Sleeps {
				g := throughputGroup{round: r, inFlight: inFlight, sleep: sleep, n: c.messages(inFlight),
					name: fmt.Sprintf("tp-r%d-f%d-%s-%s", r+1, inFlight, sleepTag(sleep), strings.ToLower(watermill.NewShortUUID()[:6]))}
				res, err := runThroughputGroup(ctx, e, c, g)
				results = append(results, res...)
				if err != nil {
					return results, err
				}
			}
		}
	}
	return results, nil
}

// measurement is one entry of a group's schedule.
type measurement struct {
	kind transportKind // empty for the ceiling
	v    variant
}

func (m measurement) String() string {
	if m.kind == "" {
		return ceilingName
	}
	return string(m.kind) + "/" + string(m.v)
}

func runThroughputGroup(ctx context.Context, e *env, c throughputConfig, g throughputGroup) ([]throughputResult, error) {
	var schedule []measurement
	for _, kind := range c.Transports {
		for _, v := range c.Variants {
			schedule = append(schedule, measurement{kind, v})
		}
	}
	if c.Ceiling {
		schedule = append(schedule, measurement{})
	}
	// Rotate by a share of the schedule per round, so that over the rounds each entry runs early and late.
	k := g.round * len(schedule) / c.Runs
	schedule = append(schedule[k:], schedule[:k]...)

	if err := publishGroup(ctx, e, c, &g); err != nil {
		return nil, err
	}
	defer removeGroup(context.WithoutCancel(ctx), e, c, g)

	var results []throughputResult
	for _, m := range schedule {
		res := throughputResult{Transport: m.kind, Name: string(m.v), InFlight: g.inFlight, Sleep: g.sleep, Round: g.round, Messages: g.n}
		var err error
		if m.kind == "" {
			res.Name = ceilingName
			res.MsgPerS, err = e.ceiling(ctx, g.name+"-"+ceilingName, g.n, g.inFlight, c.pool(g.inFlight), g.sleep)
		} else {
			res, err = e.measure(ctx, c, g, m, res)
		}
		if err != nil {
			return results, fmt.Errorf("%s, %d in flight, %s handlers: %w", m, g.inFlight, sleepLabel(g.sleep), err)
		}
		more := ""
		if m.v.batched() && res.Commits > 0 {
			more = fmt.Sprintf(", %.1f messages per commit", float64(res.Messages)/float64(res.Commits))
		}
		if res.Nacks > 0 {
			more += fmt.Sprintf(", %d failed handlings redelivered, %d of them deadlocks", res.Nacks, res.Deadlocks)
		}
		e.logf("throughput round %d/%d, %d in flight, %s handlers: %s %.1f msg/s%s", g.round+1, c.Runs, g.inFlight, sleepLabel(g.sleep), m, res.MsgPerS, more)
		results = append(results, res)
	}
	return results, nil
}

// throughputMessages makes n credit messages with their event IDs. Each measurement credits its own run's
// accounts and claims under its own inbox consumer, so the same messages serve every measurement of a group.
func throughputMessages(n, accounts int, rnd *rand.Rand) []*message.Message {
	msgs, _ := newEvents(n, accounts, rnd)
	for _, m := range msgs {
		m.Metadata.Set(inbox.DefaultIDMetadataKey, m.UUID)
	}
	return msgs
}

// runOf names the run of one measurement: its consumer group, its queue, its inbox consumer and its ledger scope.
func (g throughputGroup) runOf(kind transportKind, v variant) string {
	return g.name + "-" + string(kind) + "-" + string(v)
}

// publishGroup publishes the group's messages once to every transport: to a Kafka topic with one partition per
// message in flight, which every variant reads with a group of its own; to a RabbitMQ fanout exchange with one
// queue per variant, so that the broker makes each variant its own copy; and to a file for the GoChannel
// consumers, which publish to themselves.
func publishGroup(ctx context.Context, e *env, c throughputConfig, g *throughputGroup) error {
	rnd := rand.New(rand.NewPCG(c.Seed+uint64(g.round), uint64(g.inFlight)))
	msgs := throughputMessages(g.n, e.accounts, rnd)
	kafkaDone := false
	for _, kind := range c.Transports {
		switch kind {
		case kafkaTransport, kafkaPgxTransport:
			if kafkaDone {
				continue // both read the one topic
			}
			kafkaDone = true
			if err := e.br.createTopic(g.name, g.inFlight); err != nil {
				return err
			}
			pub, err := newSpreadPublisher(e.br.addrs)
			if err != nil {
				return err
			}
			err = pub.Publish(g.name, msgs...)
			pub.Close()
			if err != nil {
				return err
			}
		case amqpTransport:
			queues := make([]string, len(c.Variants))
			for i, v := range c.Variants {
				queues[i] = g.runOf(kind, v)
			}
			if err := c.transports[kind].(*amqpMatrix).fanOut(ctx, g.name, queues, msgs); err != nil {
				return err
			}
		case goChannel:
			g.file = filepath.Join(e.logDir, g.name+".messages")
			if err := writeMessagesFile(g.file, msgs); err != nil {
				return err
			}
		default:
			return fmt.Errorf("the throughput measurement does not run over %s", kind)
		}
	}
	return nil
}

// removeGroup deletes what publishGroup made.
func removeGroup(ctx context.Context, e *env, c throughputConfig, g throughputGroup) {
	for _, kind := range c.Transports {
		switch kind {
		case kafkaTransport, kafkaPgxTransport:
			e.br.deleteTopic(g.name) // once is enough; again finds nothing
		case amqpTransport:
			a := c.transports[kind].(*amqpMatrix)
			for _, v := range c.Variants {
				if err := a.remove(ctx, g.runOf(kind, v)); err != nil {
					e.logf("  %s: remove queue: %v", g.name, err)
				}
			}
			if err := a.ch.ExchangeDelete(g.name, false, false); err != nil {
				e.logf("  %s: remove exchange: %v", g.name, err)
			}
		case goChannel:
			_ = os.Remove(g.file)
		}
	}
}

// measure has one consumer process of transport kind and variant v read the whole group, and returns its rate from
// its first message to its last credit, as the consumer timed them: process start-up and the group join are not
// the handler's cost.
func (e *env) measure(ctx context.Context, c throughputConfig, g throughputGroup, m measurement, res throughputResult) (throughputResult, error) {
	run := g.runOf(m.kind, m.v)
	if err := seedRun(ctx, e.db, run, e.accounts, nil); err != nil {
		return res, err
	}
	defer cleanup(context.WithoutCancel(ctx), e.db, run) //nolint:errcheck // best effort; the next measurement does not depend on it
	cc := e.consumerConfig(m.v, run, run, g.sleep)
	cc.Transport, cc.Addr, cc.Pool, cc.Expect, cc.InFlight, cc.Batch = m.kind, c.transports[m.kind].addr(), c.pool(g.inFlight), g.n, g.inFlight, c.Batch
	switch m.kind {
	case kafkaTransport, kafkaPgxTransport:
		cc.Topic = g.name
	case goChannel:
		cc.Messages = g.file
	}
	p, err := spawn(e.bin, e.logDir, cc, nil)
	if err != nil {
		return res, err
	}
	defer func() {
		if p.alive() {
			p.kill()
		}
	}()
	if err := waitLine(ctx, p, "done ", c.Timeout); err != nil {
		return res, err
	}
	f := strings.Fields(p.find("done ")[0])
	t0, err0 := strconv.ParseInt(f[1], 10, 64)
	t1, err1 := strconv.ParseInt(f[2], 10, 64)
	if len(f) != 3 || err0 != nil || err1 != nil {
		return res, fmt.Errorf("consumer %s: bad report %q", p.name, p.find("done ")[0])
	}
	if err := p.stop(3 * time.Minute); err != nil {
		return res, err
	}
	// The rate counts only messages that reached the ledger, so a variant cannot look fast by skipping work.
	rows, err := ledgerRows(ctx, e.db, run)
	if err != nil {
		return res, err
	}
	if rows != g.n {
		return res, fmt.Errorf("consumer %s reported %d messages but the ledger has %d rows", p.name, g.n, rows)
	}
	res.MsgPerS = float64(g.n) / time.Duration(t1-t0).Seconds()
	res.Nacks, res.Deadlocks = p.count("nack "), p.count("deadlock ")
	if res.Commits, err = claimCommits(ctx, e.db, run); err != nil {
		return res, err
	}
	return res, nil
}

// ceiling runs the inbox's work per message straight at PostgreSQL, as pgbench would run it as a custom script
// with -M prepared: inFlight clients, each on a connection of its own, each sleeping the handler's work and then
// running the claim and the credit, prepared, in a transaction. It is the rate the database allows when the
// broker, Watermill and the inbox's bookkeeping cost nothing.
func (e *env) ceiling(ctx context.Context, run string, n, inFlight, pool int, sleep time.Duration) (float64, error) {
	if err := seedRun(ctx, e.db, run, e.accounts, nil); err != nil {
		return 0, err
	}
	defer cleanup(context.WithoutCancel(ctx), e.db, run) //nolint:errcheck // best effort
	db, err := sql.Open("postgres", withAppName(e.dsn, run))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(pool)
	db.SetMaxIdleConns(pool)
	if err := warmPool(db, nil, pool); err != nil {
		return 0, err
	}
	consumerID, err := registerConsumer(ctx, db, run)
	if err != nil {
		return 0, err
	}
	claim, err := db.PrepareContext(ctx, claimSQL)
	if err != nil {
		return 0, fmt.Errorf("prepare the claim: %w", err)
	}
	defer claim.Close()
	credit, err := db.PrepareContext(ctx, creditSQL)
	if err != nil {
		return 0, fmt.Errorf("prepare the credit: %w", err)
	}
	defer credit.Close()
	ids := make([]string, n)
	accounts := make([]int, n)
	rnd := rand.New(rand.NewPCG(uint64(n), 5))
	for i := range ids {
		ids[i] = watermill.NewUUID()
		accounts[i] = 1 + rnd.IntN(e.accounts)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	start := time.Now()
	for range inFlight {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if sleep > 0 {
					time.Sleep(sleep)
				}
				if err := ceilingTx(ctx, db, claim, credit, run, consumerID, ids[i], accounts[i]); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	if rows, err := ledgerRows(ctx, e.db, run); err != nil {
		return 0, err
	} else if rows != n {
		return 0, fmt.Errorf("the ceiling ran %d transactions but the ledger has %d rows", n, rows)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// ceilingTx is the inbox's transaction for one message, without the inbox: claim, credit, commit. The statements
// were prepared once per connection (Tx.StmtContext reuses a statement already prepared on the transaction's
// connection), so each costs one round trip, where lib/pq spends two on a statement with arguments that is not.
func ceilingTx(ctx context.Context, db *sql.DB, claim, credit *sql.Stmt, run string, consumerID int, id string, account int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var claimed bool
	if err := tx.StmtContext(ctx, claim).QueryRowContext(ctx, consumerID, id).Scan(&claimed); err != nil {
		return fmt.Errorf("ceiling claim: %w", err)
	}
	if _, err := tx.StmtContext(ctx, credit).ExecContext(ctx, run, id, account, 1, ceilingName); err != nil {
		return fmt.Errorf("ceiling credit: %w", err)
	}
	return tx.Commit()
}

// fanOut declares a durable fanout exchange with one durable queue per name bound to it, and publishes msgs to the
// exchange once, in watermill-amqp's format, waiting for the broker's confirm of every message: RabbitMQ then holds
// a copy of every message in every queue. watermill-amqp's publisher would wait for each confirm in turn.
func (a *amqpMatrix) fanOut(ctx context.Context, exchange string, queues []string, msgs []*message.Message) error {
	ch, err := a.conn.Channel()
	if err != nil {
		return fmt.Errorf("RabbitMQ channel: %w", err)
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(exchange, amqp091.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare exchange %s: %w", exchange, err)
	}
	for _, q := range queues {
		// The queue as watermill-amqp's durable-queue config declares it, or the subscriber's declaration fails.
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			return fmt.Errorf("declare queue %s: %w", q, err)
		}
		if err := ch.QueueBind(q, "", exchange, false, nil); err != nil {
			return fmt.Errorf("bind queue %s: %w", q, err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm mode: %w", err)
	}
	confirms := make([]*amqp091.DeferredConfirmation, 0, len(msgs))
	var m wamqp.DefaultMarshaler
	for _, msg := range msgs {
		pub, err := m.Marshal(msg)
		if err != nil {
			return err
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "", false, false, pub)
		if err != nil {
			return fmt.Errorf("publish to %s: %w", exchange, err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("confirm of a publish to %s: %w", exchange, err)
		}
		if !ok {
			return errors.New("RabbitMQ refused a message published to " + exchange)
		}
	}
	return nil
}

func sleepLabel(d time.Duration) string {
	if d == 0 {
		return "zero-work"
	}
	return d.String()
}

// sleepTag is a handler sleep as it can appear in a topic, queue or group name.
func sleepTag(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return strings.ReplaceAll(d.String(), ".", "_")
}
