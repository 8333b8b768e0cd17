package main

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// throughputConfig is one `harness throughput` invocation.
type throughputConfig struct {
	Variants   []variant
	Runs       int
	Messages   int
	Sleeps     []time.Duration // handler work per message; each gets its own table
	Ceiling    bool            // measure the PostgreSQL-only ceiling beside the zero-work handlers
	Partitions int             // for the report: partitions, and so goroutines of the ceiling
	Seed       uint64
	Timeout    time.Duration
}

// throughputResult is one measurement: one variant (or the ceiling), one handler sleep, one round.
type throughputResult struct {
	Name    string // a variant, or "ceiling"
	Sleep   time.Duration
	Round   int
	MsgPerS float64
}

const ceilingName = "ceiling"

// runThroughput measures in rounds. Each round publishes one topic per handler sleep and has every variant
// consume it with a group of its own, in an order that rotates from round to round, so that no variant always
// runs first (cold caches) or last (a table bloated by the others' rows).
func runThroughput(ctx context.Context, e *env, c throughputConfig) ([]throughputResult, error) {
	var results []throughputResult
	for r := range c.Runs {
		for _, sleep := range c.Sleeps {
			topic := fmt.Sprintf("tput-r%d-%s-%s", r+1, strings.ReplaceAll(sleep.String(), ".", "_"), watermill.NewShortUUID()[:6])
			if err := e.br.createTopic(topic, e.partitions); err != nil {
				return results, err
			}
			rnd := rand.New(rand.NewPCG(c.Seed+uint64(r), 4))
			// The events are recorded under the topic's name only to know their IDs; each measurement credits its
			// own run's accounts.
			if err := publishRun(ctx, e.db, e.br.addrs, topic, topic, c.Messages, e.accounts, rnd); err != nil {
				return results, err
			}
			names := make([]string, 0, len(c.Variants)+1)
			for _, v := range c.Variants {
				names = append(names, string(v))
			}
			if c.Ceiling && sleep == 0 {
				names = append(names, ceilingName)
			}
			k := r % len(names)
			names = append(names[k:], names[:k]...)
			for _, name := range names {
				var rate float64
				var err error
				if name == ceilingName {
					rate, err = e.ceiling(ctx, topic, c.Messages)
				} else {
					rate, err = e.measure(ctx, variant(name), topic, c.Messages, sleep, c.Timeout)
				}
				if err != nil {
					return results, err
				}
				e.logf("throughput round %d/%d, %s handlers: %s %.1f msg/s", r+1, c.Runs, sleepLabel(sleep), name, rate)
				results = append(results, throughputResult{Name: name, Sleep: sleep, Round: r, MsgPerS: rate})
			}
			if err := cleanup(ctx, e.db, topic); err != nil {
				return results, err
			}
			e.br.deleteTopic(topic)
		}
	}
	return results, nil
}

// measure has one consumer of variant v read the whole topic with a group of its own, and returns its rate from
// its first message to its last credit, as the consumer timed them: process start-up and the group join are not
// the handler's cost.
func (e *env) measure(ctx context.Context, v variant, topic string, n int, sleep, timeout time.Duration) (float64, error) {
	run := topic + "-" + string(v)
	if err := seedRun(ctx, e.db, run, e.accounts, nil); err != nil {
		return 0, err
	}
	defer cleanup(ctx, e.db, run) //nolint:errcheck // best effort; the next round's tables do not depend on it
	cfg := e.consumerConfig(v, run, run, sleep)
	cfg.Topic, cfg.Group, cfg.Expect = topic, run, n
	p, err := spawn(e.bin, e.logDir, cfg, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if p.alive() {
			p.kill()
		}
	}()
	deadline := time.After(timeout)
	for {
		select {
		case <-p.exited:
			return 0, fmt.Errorf("consumer %s exited: %v", p.name, p.err)
		case <-deadline:
			return 0, fmt.Errorf("consumer %s did not handle %d messages within %s", p.name, n, timeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		done := p.find("done ")
		if len(done) == 0 {
			continue
		}
		f := strings.Fields(done[0])
		t0, err0 := strconv.ParseInt(f[1], 10, 64)
		t1, err1 := strconv.ParseInt(f[2], 10, 64)
		if len(f) != 3 || err0 != nil || err1 != nil {
			return 0, fmt.Errorf("consumer %s: bad report %q", p.name, done[0])
		}
		if err := p.stop(3 * time.Minute); err != nil {
			return 0, err
		}
		// The rate counts only messages that reached the ledger, so a variant cannot look fast by skipping work.
		rows, err := ledgerRows(ctx, e.db, run)
		if err != nil {
			return 0, err
		}
		if rows != n {
			return 0, fmt.Errorf("consumer %s reported %d messages but the ledger has %d rows", p.name, n, rows)
		}
		return float64(n) / time.Duration(t1-t0).Seconds(), nil
	}
}

// ceiling runs the inbox's work per message, the claim and the credit in one transaction, straight at
// PostgreSQL from one goroutine per partition, with the same connection pool a consumer has: the rate the
// database allows when Kafka and Watermill cost nothing.
func (e *env) ceiling(ctx context.Context, topic string, n int) (float64, error) {
	run := topic + "-" + ceilingName
	if err := seedRun(ctx, e.db, run, e.accounts, nil); err != nil {
		return 0, err
	}
	defer cleanup(ctx, e.db, run) //nolint:errcheck // best effort
	db, err := sql.Open("postgres", withAppName(e.dsn, run))
	if err != nil {
		return 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(e.pool)
	db.SetMaxIdleConns(e.pool)
	ids := make([]string, n)
	accounts := make([]int, n)
	rnd := rand.New(rand.NewPCG(uint64(n), 5))
	for i := range ids {
		ids[i] = watermill.NewUUID()
		accounts[i] = 1 + rnd.IntN(e.accounts)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, e.partitions)
	start := time.Now()
	for range e.partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := ceilingTx(ctx, db, run, ids[i], accounts[i]); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// ceilingTx is the inbox's transaction for one message, without the inbox: claim, credit, commit.
func ceilingTx(ctx context.Context, db *sql.DB, run, id string, account int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var claimed bool
	if err := tx.QueryRowContext(ctx, claimSQL, run, id).Scan(&claimed); err != nil {
		return fmt.Errorf("ceiling claim: %w", err)
	}
	if _, err := tx.ExecContext(ctx, creditSQL, run, id, account, 1, ceilingName); err != nil {
		return err
	}
	return tx.Commit()
}

func sleepLabel(d time.Duration) string {
	if d == 0 {
		return "zero-work"
	}
	return d.String()
}
