package inbox_test

import (
	"context"
	"database/sql"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// trips counts the round trips of every connection a lib/pq database dialled through it: a turn of the
// conversation, the client writing and then waiting for the server's answer. Writes with no read between them are
// one turn, however many packets they take.
type trips struct {
	n atomic.Int64
}

// openCountedDB opens the test database over lib/pq with its connections counted by t.
func openCountedDB(tb testing.TB, t *trips) *sql.DB {
	tb.Helper()
	testkit.SkipWhenShort(tb, "PostgreSQL")
	connector, err := pq.NewConnector(testDSN())
	require.NoError(tb, err)
	connector.Dialer(tripDialer{t})
	db := sql.OpenDB(connector)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		tb.Fatalf("PostgreSQL is not reachable at %s: %v", testDSN(), err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

type tripDialer struct{ t *trips }

func (d tripDialer) Dial(network, address string) (net.Conn, error) {
	return d.DialTimeout(network, address, 0)
}

func (d tripDialer) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &tripConn{Conn: c, t: d.t, read: true}, nil
}

type tripConn struct {
	net.Conn
	t    *trips
	mu   sync.Mutex
	read bool // the last operation was a read: the next write starts a turn
}

func (c *tripConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.read {
		c.read = false
		c.t.n.Add(1)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *tripConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read = true
	c.mu.Unlock()
	return n, err
}
