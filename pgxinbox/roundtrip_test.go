package pgxinbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// tripCounter counts the round trips of every connection a pool dialled through it, and the time the client
// waited for the answers. A round trip is a turn of the conversation: the client writes, then waits for the
// server's answer. Writes that follow one another without a read between them (a pipeline flushed in pieces) are
// one turn, so the count is what latency costs, whatever the number of packets. Each turn is sorted by what its
// first write holds (see turnKind), so that a message's time can be told apart: BEGIN, statements, COMMIT.
type tripCounter struct {
	trips  atomic.Int64
	writes atomic.Int64
	turns  [turnKinds]atomic.Int64
	waited [turnKinds]atomic.Int64 // nanoseconds from a turn's first write to the first byte of its answer
}

// reset starts a measurement: the round trips of connecting and of earlier work are not counted.
func (c *tripCounter) reset() {
	c.trips.Store(0)
	c.writes.Store(0)
	for k := range turnKinds {
		c.turns[k].Store(0)
		c.waited[k].Store(0)
	}
}

// waitedTotal is the time the client spent waiting for answers, over every kind of turn.
func (c *tripCounter) waitedTotal() time.Duration {
	var d int64
	for k := range turnKinds {
		d += c.waited[k].Load()
	}
	return time.Duration(d)
}

// turnKind sorts a turn by the frontend messages of its first write.
type turnKind int

const (
	turnOther     turnKind = iota
	turnBegin              // a simple query starting with BEGIN
	turnCommit             // a simple query starting with COMMIT
	turnStatement          // one statement in the extended protocol, or a simple query of another statement
	turnPipeline           // more than one statement before a sync: BEGIN with the first statement
	turnKinds
)

var turnKindNames = [turnKinds]string{"other", "begin", "commit", "statement", "pipeline"}

// kindOf reads the frontend messages in p (a one-byte type, then a length that counts itself) and sorts them.
func kindOf(p []byte) turnKind {
	executes := 0
	for len(p) >= 5 {
		typ, n := p[0], int(binary.BigEndian.Uint32(p[1:5]))
		if n < 4 || len(p) < 1+n {
			break
		}
		body := p[5 : 1+n]
		switch typ {
		case 'Q':
			q := strings.ToLower(strings.TrimSpace(string(bytes.TrimRight(body, "\x00"))))
			switch {
			case strings.HasPrefix(q, "begin"):
				return turnBegin
			case strings.HasPrefix(q, "commit"):
				return turnCommit
			}
			return turnStatement
		case 'E':
			executes++
		}
		p = p[1+n:]
	}
	switch {
	case executes == 1:
		return turnStatement
	case executes > 1:
		return turnPipeline
	}
	return turnOther
}

// dial is a pgconn DialFunc that counts the round trips of the connection it opens.
func (c *tripCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cc := &countedConn{Conn: conn, c: c}
	cc.answered.Store(true)
	return cc, nil
}

type countedConn struct {
	net.Conn
	c *tripCounter
	// answered is set once the server said something since the client's last write: the next write is a new turn.
	// pgconn may read on a goroutine of its own while it flushes a pipeline, hence the atomics.
	answered atomic.Bool
	// The turn waiting for its answer: when it started (Unix nanoseconds, 0 for none) and its kind.
	started atomic.Int64
	kind    atomic.Int64
}

func (cc *countedConn) Write(p []byte) (int, error) {
	if cc.answered.Swap(false) {
		cc.c.trips.Add(1)
		k := kindOf(p)
		cc.c.turns[k].Add(1)
		cc.kind.Store(int64(k))
		cc.started.Store(time.Now().UnixNano())
	}
	cc.c.writes.Add(1)
	return cc.Conn.Write(p)
}

func (cc *countedConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if n > 0 {
		if start := cc.started.Swap(0); start != 0 {
			cc.c.waited[cc.kind.Load()].Add(time.Now().UnixNano() - start)
		}
		cc.answered.Store(true)
	}
	return n, err
}

// openCountingPool is openPoolIn with every connection's round trips counted by trips.
func openCountingPool(t testing.TB, trips *tripCounter, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	return openCountingPoolWith(t, trips, mode, nil)
}

// openCountingPoolWith is openCountingPool with settings for every session of the pool (params, such as
// synchronous_commit).
func openCountingPoolWith(t testing.TB, trips *tripCounter, mode pgx.QueryExecMode, params map[string]string) *pgxpool.Pool {
	t.Helper()
	inboxtest.SkipWhenShort(t, "PostgreSQL")
	cfg, err := pgxpool.ParseConfig(testDSN())
	require.NoError(t, err)
	cfg.MaxConns = 10
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.ConnConfig.DialFunc = trips.dial
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %v", testDSN(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// openCountingLibpq opens a database/sql handle over lib/pq on the test database whose connections trips counts,
// with as many connections as openCountingPoolWith's pool.
func openCountingLibpq(t testing.TB, trips *tripCounter) *sql.DB {
	t.Helper()
	inboxtest.SkipWhenShort(t, "PostgreSQL")
	conn, err := pq.NewConnector(testDSN())
	require.NoError(t, err)
	conn.Dialer(countingDialer{trips})
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(10)
	db.SetMaxIdleConns(10)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		t.Fatalf("PostgreSQL is not reachable at %s over lib/pq (set INBOX_TEST_DATABASE_URL): %v", testDSN(), err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// countingDialer is lib/pq's dialer through a tripCounter.
type countingDialer struct{ c *tripCounter }

func (d countingDialer) Dial(network, addr string) (net.Conn, error) {
	return d.c.dial(context.Background(), network, addr)
}

func (d countingDialer) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return d.c.dial(ctx, network, addr)
}

func (d countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.c.dial(ctx, network, addr)
}

// messagesOverCountedPool builds pgxinbox's middleware, with opts, over a pool that sends statements in mode and
// counts its round trips, around a handler that credits account 1 with one UPDATE. It applies a warm-up message
// (the schema check, and the statements' first preparation or description), then n messages, and returns the
// round trips of those n, the bundle, the handler and how often the handler ran.
func messagesOverCountedPool(t *testing.T, mode pgx.QueryExecMode, n int, opts ...inbox.Option) (int64, *testBundle, message.HandlerFunc, *atomic.Int64) {
	t.Helper()
	var trips tripCounter
	pool := openCountingPool(t, &trips, mode)
	b := newBundleOn(t, pool)
	ib, err := pgxinbox.New(pool, b.Options(opts...)...)
	require.NoError(t, err)
	calls := &atomic.Int64{}
	h := ib.Middleware(b.Credit(1, calls))
	_, err = h(newMsg("warm-up"))
	require.NoError(t, err)
	trips.reset()
	for i := range n {
		_, err := h(newMsg(fmt.Sprintf("evt-%d", i)))
		require.NoError(t, err)
	}
	return trips.trips.Load(), b, h, calls
}

// Copies of applied messages that meet in one batch end with the batch's claim: the claim finds their rows, one
// statement reads them with their produced messages, and the transaction rolls back, three round trips for the
// whole batch where each copy alone would begin, claim, read and roll back in its own.
func TestRoundTrips_CopiesThatMeetInABatchCostItsClaimAReadAndARollback(t *testing.T) {
	t.Parallel()
	var trips tripCounter
	pool := openCountingPool(t, &trips, pgx.QueryExecModeCacheStatement)
	b := newBundleOn(t, pool)
	const n = 16
	ib, err := pgxinbox.New(pool, b.Options(inbox.WithBatch(time.Minute, n), inbox.WithBatchConcurrency(1))...)
	require.NoError(t, err)
	var calls atomic.Int64
	credit := b.Credit(1, &calls)
	gate, release := inboxtest.Gate(t)
	blocking := make(chan struct{})
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == "blocker" {
			close(blocking)
			<-gate
			return nil, nil
		}
		return credit(msg)
	})
	ids := make([]string, 2*n)
	for k := range ids {
		ids[k] = fmt.Sprintf("evt-%d", k)
		_, err := h(newMsg(ids[k])) // alone: nothing else runs
		require.NoError(t, err)
	}

	// A message that holds the consumer's turn, so that the copies queue and form batches of n.
	blocker := make(chan error, 1)
	go func() { _, err := h(newMsg("blocker")); blocker <- err }()
	<-blocking
	// The first n prepare the batch's statements on the connection the next batch takes again.
	require.Empty(t, inboxtest.DeliverCopies(t, h, ids[:n], 1))
	trips.reset()
	require.Empty(t, inboxtest.DeliverCopies(t, h, ids[n:], 1))
	got := trips.trips.Load()
	release()
	require.NoError(t, <-blocker)

	require.EqualValues(t, 2*n, calls.Load(), "no copy's handler ran")
	require.LessOrEqual(t, got, int64(3), "%d copies cost %d round trips", n, got)
}
