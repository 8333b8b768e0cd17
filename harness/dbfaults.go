package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"time"
)

// dbFaultsConfig is one `harness db-faults` invocation.
type dbFaultsConfig struct {
	Variants       []variant
	Runs           int
	Events         int
	Sleep          time.Duration
	TerminateEvery time.Duration // mean interval between rounds of pg_terminate_backend
	Restarts       int           // PostgreSQL restarts per run, spread evenly over the events
	Seed           uint64
	Drain          time.Duration
	// Restart restarts the PostgreSQL server the consumer uses: one the harness started itself, or one whose
	// restart command the user gave. It returns once the server was asked to come back, or has.
	Restart func(context.Context) error
}

// dbFaultsResult is one run of one variant.
type dbFaultsResult struct {
	Variant     variant
	Run         int
	Terminated  int // backends terminated while in a transaction
	Restarts    int
	Downtime    time.Duration   // total time PostgreSQL refused connections
	Recoveries  []time.Duration // per restart: from PostgreSQL accepting connections to the consumer's next credit
	Nacks       int             // handler failures the router nacked and Kafka redelivered
	Skipped     int
	Duplicates  int
	Losses      int
	SameProcess bool // the consumer was never restarted and closed cleanly at the end
	Elapsed     time.Duration

	// The run as it happened, in seconds since the consumer started working: for the chart.
	Progress     []progressSample
	Outages      [][2]float64 // restart command started, PostgreSQL accepting connections again
	Terminations []float64    // rounds of pg_terminate_backend that ended at least one backend
}

// progressSample is how many distinct events had been credited at a moment of a run.
type progressSample struct {
	At       float64
	Credited int
}

// shellRestart is a Restart that runs the user's restart command with sh.
func shellRestart(cmdline string) func(context.Context) error {
	return func(ctx context.Context) error {
		out, err := exec.CommandContext(ctx, "sh", "-c", cmdline).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", cmdline, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}

// terminateSQL ends the backends of one run that are inside a transaction: a claim, a credit or a commit in flight.
// Idle connections are left alone, since terminating them tests nothing the pool does not already retry.
const terminateSQL = `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = $1 AND xact_start IS NOT NULL AND pid <> pg_backend_pid()`

func runDBFaults(ctx context.Context, e *env, c dbFaultsConfig) ([]dbFaultsResult, error) {
	var results []dbFaultsResult
	for r := range c.Runs {
		for _, v := range c.Variants {
			res, err := dbFaultsRun(ctx, e, c, v, r)
			if err != nil {
				return results, err
			}
			e.logf("db-faults %s run %d/%d: %d backends terminated, %d restarts (%.1fs down), %d nacks, %d skipped, %d duplicates, %d lost, same process: %v (%s)",
				v, r+1, c.Runs, res.Terminated, res.Restarts, res.Downtime.Seconds(), res.Nacks, res.Skipped,
				res.Duplicates, res.Losses, res.SameProcess, res.Elapsed.Round(time.Second))
			results = append(results, res)
		}
	}
	return results, nil
}

// dbFaultsRun runs one consumer through the whole topic while the database misbehaves. The consumer is started
// once and never restarted: whatever the faults do to it, it must get back to work by itself.
func dbFaultsRun(ctx context.Context, e *env, c dbFaultsConfig, v variant, r int) (dbFaultsResult, error) {
	start := time.Now()
	run := newRun("dbf", v, r)
	res := dbFaultsResult{Variant: v, Run: r}
	if err := e.br.createTopic(run, e.partitions); err != nil {
		return res, err
	}
	defer e.br.deleteTopic(run)
	rnd := rand.New(rand.NewPCG(c.Seed+uint64(r), 3))
	if err := publishRun(ctx, e.db, e.br.addrs, run, run, c.Events, e.accounts, rnd, v.publisherOptions()...); err != nil {
		return res, err
	}
	p, err := spawn(e.bin, e.logDir, e.consumerConfig(v, run, run+"-c1", c.Sleep), nil)
	if err != nil {
		return res, err
	}
	defer func() {
		if p.alive() {
			p.kill()
		}
	}()
	select {
	case <-p.working:
	case <-p.exited:
		return res, fmt.Errorf("consumer %s exited before working: %v", p.name, p.err)
	case <-time.After(time.Minute):
		return res, fmt.Errorf("consumer %s did not start working", p.name)
	}

	nextRestart := 0
	nextTerminate := time.Now().Add(jitter(rnd, c.TerminateEvery))
	t0 := time.Now()
	since := func() float64 { return time.Since(t0).Seconds() }
	var lastSample time.Time
	for {
		if !p.alive() {
			return res, fmt.Errorf("run %s: the consumer exited during the faults (%v); it must recover by itself", run, p.err)
		}
		rows, err := creditedEvents(ctx, e.db, run)
		if err != nil {
			return res, err
		}
		if time.Since(lastSample) >= 200*time.Millisecond || rows >= c.Events {
			res.Progress = append(res.Progress, progressSample{At: since(), Credited: rows})
			lastSample = time.Now()
		}
		if rows >= c.Events {
			break
		}
		if nextRestart < c.Restarts && rows >= (nextRestart+1)*c.Events/(c.Restarts+1) {
			began := since()
			down, recovery, err := e.restartPostgres(ctx, c.Restart, run, p)
			if err != nil {
				return res, err
			}
			res.Outages = append(res.Outages, [2]float64{began, began + down.Seconds()})
			nextRestart++
			res.Restarts++
			res.Downtime += down
			res.Recoveries = append(res.Recoveries, recovery)
			e.logf("  %s: restart %d/%d at %d ledger rows: down %.1fs, first credit %.1fs after it was back",
				run, nextRestart, c.Restarts, rows, down.Seconds(), recovery.Seconds())
			continue
		}
		if time.Now().After(nextTerminate) {
			var n int
			if err := e.db.QueryRowContext(ctx, terminateSQL, run).Scan(&n); err != nil {
				return res, fmt.Errorf("terminate backends: %w", err)
			}
			res.Terminated += n
			if n > 0 {
				res.Terminations = append(res.Terminations, since())
			}
			nextTerminate = time.Now().Add(jitter(rnd, c.TerminateEvery))
		}
		if time.Since(start) > c.Drain {
			return res, fmt.Errorf("run %s: %d of %d events credited after %s", run, rows, c.Events, c.Drain)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every event has a credit; what is left is for the group to commit its offsets, then the consumer must close
	// on its own terms: a clean exit says it is still healthy, not merely alive.
	if err := e.waitDrained(ctx, run, time.Second, c.Drain, p.alive); err != nil {
		return res, err
	}
	stopErr := p.stop(time.Minute)
	res.SameProcess = stopErr == nil
	res.Nacks = p.count("nack ")
	res.Skipped = p.count("skip ")
	t, err := count(ctx, e.db, run)
	if err != nil {
		return res, err
	}
	res.Duplicates, res.Losses = t.Duplicates, t.Losses
	res.Elapsed = time.Since(start)
	if stopErr != nil {
		return res, fmt.Errorf("run %s: the consumer did not close cleanly after the faults: %w", run, stopErr)
	}
	return res, cleanup(ctx, e.db, run)
}

// restartPostgres restarts the server, waits until it accepts connections again, and then until the consumer
// credits something: down is how long the server refused connections, recovery how long the consumer took after.
func (e *env) restartPostgres(ctx context.Context, restart func(context.Context) error, run string, p *proc) (down, recovery time.Duration, err error) {
	before, err := ledgerRows(ctx, e.db, run)
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	if err := restart(ctx); err != nil {
		return 0, 0, fmt.Errorf("restart PostgreSQL: %w", err)
	}
	if err := waitForDB(ctx, e.db, time.Minute); err != nil {
		return 0, 0, fmt.Errorf("PostgreSQL did not come back after a restart: %w", err)
	}
	down = time.Since(t0)
	back := time.Now()
	for {
		rows, err := ledgerRows(ctx, e.db, run)
		if err == nil && rows > before {
			return down, time.Since(back), nil
		}
		if !p.alive() {
			return down, 0, fmt.Errorf("run %s: the consumer exited after the restart (%v)", run, p.err)
		}
		if time.Since(back) > 2*time.Minute {
			return down, 0, errors.New("the consumer did not credit anything within 2 minutes of the restart")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// jitter returns a duration uniform in [d/2, 3d/2), so the terminations do not fall into step with the handlers.
func jitter(rnd *rand.Rand, d time.Duration) time.Duration {
	return d/2 + time.Duration(rnd.Int64N(int64(d)))
}
