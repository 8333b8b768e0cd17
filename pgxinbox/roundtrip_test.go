package pgxinbox_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// tripCounter counts the round trips of every connection a pool dialled through it. A round trip is a turn of the
// conversation: the client writes, then waits for the server's answer. Writes that follow one another without a
// read between them (a pipeline flushed in pieces) are one turn, so the count is what latency costs, whatever the
// number of packets.
type tripCounter struct {
	trips  atomic.Int64
	writes atomic.Int64
}

// reset starts a measurement: the round trips of connecting and of earlier work are not counted.
func (c *tripCounter) reset() {
	c.trips.Store(0)
	c.writes.Store(0)
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
	// pgconn may read on a goroutine of its own while it flushes a pipeline, hence the atomic.
	answered atomic.Bool
}

func (cc *countedConn) Write(p []byte) (int, error) {
	if cc.answered.Swap(false) {
		cc.c.trips.Add(1)
	}
	cc.c.writes.Add(1)
	return cc.Conn.Write(p)
}

func (cc *countedConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if n > 0 {
		cc.answered.Store(true)
	}
	return n, err
}

// openCountingPool is openPoolIn with every connection's round trips counted by trips.
func openCountingPool(t testing.TB, trips *tripCounter, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	needsDB(t)
	cfg, err := pgxpool.ParseConfig(testDSN())
	require.NoError(t, err)
	cfg.MaxConns = 10
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.ConnConfig.DialFunc = trips.dial
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
