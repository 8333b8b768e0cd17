package inboxcheck

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/effectively-once/watermill-inbox"
)

// Defaults of Config.
const (
	// DefaultTable is the inbox table Run uses when Config.Table is empty.
	DefaultTable = "inboxcheck"
	// DefaultCopies is how many times the sequential way delivers each message.
	DefaultCopies = 3
	// DefaultRouters is how many routers the concurrent way delivers each message to at once.
	DefaultRouters = 3
	// DefaultTimeout bounds each delivery until its ack.
	DefaultTimeout = 30 * time.Second
)

// Config is what Run checks.
type Config struct {
	// Database is the database the inbox keeps its table in: inbox.OnSQL(db), pgxinbox.Database(pool) or
	// mysqlinbox.Database(db). Required.
	Database *inbox.Database
	// Options are your inbox options (WithIDMetadataKey, WithBatch, WithLease, WithDeadLetter, ...). Run adds its
	// own WithTable and WithConsumer after them.
	Options []inbox.Option
	// Middlewares are your router's middlewares, which run outside the inbox, as router.AddMiddleware adds them
	// before the inbox's. Optional.
	Middlewares []message.HandlerMiddleware
	// Handler is your handler, as the router runs it under the inbox. Required.
	Handler message.HandlerFunc
	// Messages are the events to deliver, each with its event ID where your options read it. Run delivers copies
	// of them (Message.Copy: the same UUID, payload and metadata). Required.
	Messages []*message.Message
	// Reset puts your tables back in the state before the messages. Required.
	Reset func(ctx context.Context) error
	// State reads what your handler changes, as a value reflect.DeepEqual compares: a map of balances, a slice of
	// rows. Required.
	State func(ctx context.Context) (any, error)
	// Table is the inbox table; empty for DefaultTable.
	Table string
	// Copies is how many times the sequential way delivers each message; 0 for DefaultCopies.
	Copies int
	// Routers is how many routers the concurrent way delivers each message to; 0 for DefaultRouters.
	Routers int
	// Timeout bounds each delivery until its ack; 0 for DefaultTimeout.
	Timeout time.Duration
}

// Way names a way of delivering the messages.
type Way string

const (
	// Once delivers each message once: the state every other way must leave.
	Once Way = "once"
	// Sequential delivers each message Copies times in a row.
	Sequential Way = "sequential"
	// Concurrent delivers each message to Routers routers at once.
	Concurrent Way = "concurrent"
	// RolledBack fails the first attempt of each message after the handler returned, before the inbox commits.
	RolledBack Way = "rolled back after the handler"
	// Unacked fails the first attempt of each message after the inbox committed, before the ack.
	Unacked Way = "not acked after the commit"
)

// Ways are the ways Run delivers the messages, in order.
var Ways = []Way{Once, Sequential, Concurrent, RolledBack, Unacked}

// WayRun is what one way did.
type WayRun struct {
	Way Way
	// Deliveries counts the messages the router handed to the inbox, redeliveries included.
	Deliveries int64
	// HandlerRuns counts the calls of your handler.
	HandlerRuns int64
	// State is what Config.State read afterwards.
	State any
}

// Report is what Run did, one WayRun per way, in the order of Ways.
type Report struct {
	Runs []WayRun
}

// Run delivers cfg.Messages in every way of Ways and fails t, naming the way, when one leaves another state than
// delivering each message once. See the package documentation.
func Run(t testing.TB, cfg Config) Report {
	t.Helper()
	if err := cfg.setDefaults(); err != nil {
		t.Fatalf("inboxcheck: %v", err)
	}
	ctx := context.Background()
	if err := cfg.Database.Migrate(ctx, inbox.WithTable(cfg.Table)); err != nil {
		t.Fatalf("inboxcheck: migrate the inbox table %s: %v", cfg.Table, err)
	}
	run := newRunID()
	var report Report
	var want any
	for i, way := range Ways {
		if err := cfg.Reset(ctx); err != nil {
			t.Fatalf("inboxcheck: %s: reset: %v", way, err)
		}
		r, err := cfg.deliver(ctx, way, fmt.Sprintf("inboxcheck-%s-%d", run, i))
		if err != nil {
			t.Fatalf("inboxcheck: %s: %v", way, err)
		}
		report.Runs = append(report.Runs, r)
		if way == Once {
			want = r.State
			continue
		}
		if !reflect.DeepEqual(r.State, want) {
			t.Errorf("inboxcheck: delivered %s, the messages left the state\n\t%#v\nwhere one delivery of each left\n\t%#v\n"+
				"The handler ran %d times for %d deliveries: a copy's effect was applied again. The inbox covers only what "+
				"the handler writes in the transaction it hands over (inbox.TxFromContext): a write on a second connection, "+
				"or a call to another service, runs again when that transaction rolls back. Write on the inbox's "+
				"transaction, or use lease mode (inbox.WithLease) with the provider's idempotency key.",
				way, r.State, want, r.HandlerRuns, r.Deliveries)
		}
	}
	return report
}

func (cfg *Config) setDefaults() error {
	switch {
	case cfg.Database == nil:
		return errors.New("Config.Database is nil")
	case cfg.Handler == nil:
		return errors.New("Config.Handler is nil")
	case len(cfg.Messages) == 0:
		return errors.New("Config.Messages is empty")
	case cfg.Reset == nil || cfg.State == nil:
		return errors.New("Config.Reset and Config.State are both required")
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.Copies <= 0 {
		cfg.Copies = DefaultCopies
	}
	if cfg.Routers <= 0 {
		cfg.Routers = DefaultRouters
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return nil
}

// newRunID returns a short random name, so that the consumers of two runs over one table never meet.
func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// deliver delivers the messages in way, under consumer, and reads the state they leave.
func (cfg *Config) deliver(ctx context.Context, way Way, consumer string) (WayRun, error) {
	r := WayRun{Way: way}
	var deliveries, runs atomic.Int64
	ib, err := cfg.Database.New(append(append([]inbox.Option(nil), cfg.Options...),
		inbox.WithTable(cfg.Table), inbox.WithConsumer(consumer))...)
	if err != nil {
		return r, fmt.Errorf("build the inbox: %w", err)
	}
	routers := 1
	if way == Concurrent {
		routers = cfg.Routers
	}
	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer pubsub.Close()
	var failed sync.Map // the messages (by UUID, which a redelivery keeps) whose first attempt failed on purpose
	failOnce := func(msg *message.Message) bool {
		_, seen := failed.LoadOrStore(msg.UUID, struct{}{})
		return !seen
	}
	stop, err := startRouters(routers, pubsub, func(h message.HandlerFunc) message.HandlerFunc {
		// Outermost: counts what the router hands over, and, unacked, fails a first attempt the inbox committed.
		return func(msg *message.Message) ([]*message.Message, error) {
			deliveries.Add(1)
			out, err := h(msg)
			if err == nil && way == Unacked && failOnce(msg) {
				return nil, errors.New("inboxcheck: the consumer stopped after the commit, before the ack")
			}
			return out, err
		}
	}, cfg.Middlewares, ib.Middleware, func(msg *message.Message) ([]*message.Message, error) {
		runs.Add(1)
		out, err := cfg.Handler(msg)
		if err == nil && way == RolledBack && failOnce(msg) {
			return nil, errors.New("inboxcheck: the consumer stopped after the handler, before the inbox's commit")
		}
		return out, err
	})
	if err != nil {
		return r, err
	}
	defer stop()
	copies := 1
	if way == Sequential {
		copies = cfg.Copies
	}
	for _, msg := range cfg.Messages {
		for range copies {
			if err := publish(ctx, pubsub, msg.Copy(), cfg.Timeout); err != nil {
				return r, fmt.Errorf("message %s: %w", msg.UUID, err)
			}
		}
	}
	r.Deliveries, r.HandlerRuns = deliveries.Load(), runs.Load()
	r.State, err = cfg.State(ctx)
	if err != nil {
		return r, fmt.Errorf("read the state: %w", err)
	}
	return r, nil
}
