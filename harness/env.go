package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Defaults shared by the subcommands and the consumer. The group timeouts are short so that a hard-killed member is
// noticed in about two seconds instead of Sarama's ten: twenty kills per run are twenty waits for that.
const (
	defaultDSN        = "postgres://root@127.0.0.1:5432/test?sslmode=disable"
	defaultSession    = time.Second
	defaultHeartbeat  = 250 * time.Millisecond
	defaultRebalance  = 5 * time.Second
	defaultPartitions = 6
	defaultAccounts   = 100
	// defaultPool is one connection per partition a consumer may own plus headroom for the stall bookkeeping.
	defaultPool = defaultPartitions + 4
)

// env is what every measurement needs: the broker, the database, the consumer binary and where to log.
type env struct {
	bin        string // the harness binary, re-executed as `bin consume`
	logDir     string // consumer logs, one file per process
	dsn        string
	db         *sql.DB
	br         *broker
	progress   io.Writer
	session    time.Duration
	heartbeat  time.Duration
	rebalance  time.Duration
	partitions int
	accounts   int
	pool       int
}

// envConfig is the part of env that comes from flags.
type envConfig struct {
	Bin        string
	LogDir     string
	DSN        string
	Brokers    []string
	Progress   io.Writer
	Session    time.Duration
	Heartbeat  time.Duration
	Rebalance  time.Duration
	Partitions int
	Accounts   int
}

func newEnv(ctx context.Context, c envConfig) (*env, error) {
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Heartbeat >= c.Session {
		return nil, fmt.Errorf("the heartbeat interval (%s) must be shorter than the session timeout (%s)", c.Heartbeat, c.Session)
	}
	if c.LogDir == "" {
		dir, err := os.MkdirTemp("", "harness-logs-")
		if err != nil {
			return nil, err
		}
		c.LogDir = dir
	} else if err := os.MkdirAll(c.LogDir, 0o755); err != nil {
		return nil, err
	}
	db, err := openDB(ctx, c.DSN)
	if err != nil {
		return nil, err
	}
	br, err := startBroker(c.Brokers, c.Heartbeat)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &env{
		bin: c.Bin, logDir: c.LogDir, dsn: c.DSN, db: db, br: br, progress: c.Progress,
		session: c.Session, heartbeat: c.Heartbeat, rebalance: c.Rebalance,
		partitions: c.Partitions, accounts: c.Accounts, pool: c.Partitions + 4,
	}, nil
}

// withDatabase returns a copy of e whose consumers and checks use the database at dsn, migrated; the broker stays
// e's. The caller closes the copy's db, and only that.
func (e *env) withDatabase(ctx context.Context, dsn string) (*env, error) {
	db, err := openDB(ctx, dsn)
	if err != nil {
		return nil, err
	}
	c := *e
	c.dsn, c.db = dsn, db
	return &c, nil
}

// openDB connects the harness itself to dsn, waits until the server answers, and creates the harness's tables.
func openDB(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := sql.Open("postgres", withAppName(dsn, "harness"))
	if err != nil {
		return nil, err
	}
	if err := waitForDB(ctx, db, 10*time.Second); err != nil {
		db.Close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", dsn, err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

func (e *env) close() {
	e.br.close()
	e.db.Close()
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// consumerConfig returns the command line of one consumer of a run, over the env's Kafka broker unless the caller
// names another transport.
func (e *env) consumerConfig(v variant, run, name string, sleep time.Duration) consumerConfig {
	return consumerConfig{
		Transport: kafkaTransport, Addr: joinComma(e.br.addrs), Variant: v, Run: run, Name: name, DSN: e.dsn,
		Sleep: sleep, Session: e.session, Heartbeat: e.heartbeat, Rebalance: e.rebalance, Pool: e.pool, Batch: defaultBatch,
	}
}

// newRun names a run. The name is its topic, its group, its inbox consumer and its ledger scope, so runs of the
// same variant never share state, even across processes.
func newRun(kind string, v variant, r int) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%s-r%d-%s", kind, v, r+1, hex.EncodeToString(b[:]))
}

// waitForDB pings until the database answers or timeout passes; after a restart it takes a few seconds.
func waitForDB(ctx context.Context, db *sql.DB, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := db.PingContext(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitDrained waits until the group has committed every message of the topic and the ledger has stopped growing
// for settle, then returns. A drained group is one a new consumer would get nothing from.
func (e *env) waitDrained(ctx context.Context, run string, settle, timeout time.Duration, alive func() bool) error {
	deadline := time.Now().Add(timeout)
	last, lastChange := -1, time.Now()
	for {
		if alive != nil && !alive() {
			return fmt.Errorf("run %s: the consumer exited before the topic was drained", run)
		}
		backlog, err := e.br.backlog(run, run)
		if err != nil {
			return err
		}
		rows, err := ledgerRows(ctx, e.db, run)
		if err != nil {
			return err
		}
		if rows != last {
			last, lastChange = rows, time.Now()
		}
		if backlog == 0 && time.Since(lastChange) >= settle {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s: not drained after %s (%d messages uncommitted, %d ledger rows)", run, timeout, backlog, rows)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func joinComma(s []string) string { return strings.Join(s, ",") }
