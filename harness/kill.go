package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// killConfig is one `harness kill` invocation.
type killConfig struct {
	Variants []variant
	Runs     int
	Kills    int           // hard kills per run
	Events   int           // credit events per run
	MinWork  time.Duration // each kill lands this long or longer after the consumer started working...
	MaxWork  time.Duration // ...and no longer than this
	Sleep    time.Duration // handler work per message
	Seed     uint64
	Drain    time.Duration // how long the final consumer may take to drain the topic
	Batch    batchConfig   // the batch variant's settings; the zero value is defaultBatch
}

// consumerConfig is the command line of one consumer of run r of v.
func (c killConfig) consumerConfig(e *env, v variant, run, name string) consumerConfig {
	cfg := e.consumerConfig(v, run, name, c.Sleep)
	if c.Batch != (batchConfig{}) {
		cfg.Batch = c.Batch
	}
	return cfg
}

// killResult is one run of one variant.
type killResult struct {
	Variant    variant
	Run        int
	Kills      int // kills that landed while the consumer was working
	Duplicates int
	Losses     int
	Skipped    int // redeliveries the inbox recognised and skipped
	Credits    int // ledger rows
	Commits    int // transactions that claimed the events in the inbox: as many as credits, unless a batch claimed several
	// Partitions and InDefault are, for the partitioned variant, how many partitions hold the run's inbox rows and
	// how many of them are in the default partition (0 when every UUIDv7 found the partition of its hour).
	Partitions, InDefault int
	Elapsed               time.Duration
}

// killSchedule draws the delays of every kill of every run from one seed. Every variant's run r uses row r, so
// the variants differ in what they do, never in when they are killed.
func killSchedule(c killConfig) [][]time.Duration {
	rnd := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	out := make([][]time.Duration, c.Runs)
	for r := range out {
		out[r] = make([]time.Duration, c.Kills)
		for k := range out[r] {
			out[r][k] = c.MinWork + time.Duration(rnd.Int64N(int64(c.MaxWork-c.MinWork)+1))
		}
	}
	return out
}

// runKill runs every variant Runs times, interleaved (run 1 of each variant, then run 2...), so that a machine
// that slows down over the hour slows every variant alike.
func runKill(ctx context.Context, e *env, c killConfig) ([]killResult, error) {
	schedule := killSchedule(c)
	var results []killResult
	for r := range c.Runs {
		for _, v := range c.Variants {
			res, err := killRun(ctx, e, c, v, r, schedule[r])
			if err != nil {
				return results, err
			}
			e.logf("kill %s run %d/%d: %d kills, %d duplicates, %d lost, %d skipped by the inbox, %d credits in %d commits (%s)",
				v, r+1, c.Runs, res.Kills, res.Duplicates, res.Losses, res.Skipped, res.Credits, res.Commits, res.Elapsed.Round(time.Second))
			results = append(results, res)
		}
	}
	return results, nil
}

// killRun publishes the events, then starts a consumer and SIGKILLs it after each delay of the schedule, counted
// from the moment it starts working (a restarted member first waits for the group to drop its dead predecessor,
// about one session timeout, and a kill in that wait would test nothing). When the group has committed the whole
// topic before the schedule is used up, the remaining kills are not made: there is no work left for them to
// interrupt, and the result says how many landed. A last consumer then drains the topic and closes gracefully.
func killRun(ctx context.Context, e *env, c killConfig, v variant, r int, delays []time.Duration) (killResult, error) {
	start := time.Now()
	run := newRun("kill", v, r)
	res := killResult{Variant: v, Run: r}
	if err := e.br.createTopic(run, e.partitions); err != nil {
		return res, err
	}
	defer e.br.deleteTopic(run)
	rnd := rand.New(rand.NewPCG(c.Seed+uint64(r), 1))
	if err := publishRun(ctx, e.db, e.br.addrs, run, run, c.Events, e.accounts, rnd, v.publisherOptions()...); err != nil {
		return res, err
	}
	var procs []*proc
	for k, d := range delays {
		p, err := spawn(e.bin, e.logDir, c.consumerConfig(e, v, run, fmt.Sprintf("%s-life%d", run, k+1)), nil)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
		drained, err := e.waitWorking(ctx, run, p)
		if err != nil {
			p.kill()
			return res, err
		}
		if drained {
			p.kill() // it has nothing in flight: it never received a message
			e.logf("  %s: the group committed the whole topic after %d kills; no work left to interrupt", run, res.Kills)
			break
		}
		time.Sleep(d)
		p.kill()
		res.Kills++
		rows, _ := ledgerRows(ctx, e.db, run)
		e.logf("  %s: kill %d/%d after %.1fs of work (%d ledger rows)", run, k+1, len(delays), d.Seconds(), rows)
	}
	final, err := spawn(e.bin, e.logDir, c.consumerConfig(e, v, run, run+"-final"), nil)
	if err != nil {
		return res, err
	}
	procs = append(procs, final)
	if err := e.waitDrained(ctx, run, time.Second, c.Drain, final.alive); err != nil {
		final.kill()
		return res, err
	}
	if err := final.stop(3 * time.Minute); err != nil {
		return res, fmt.Errorf("final consumer of %s: %w", run, err)
	}
	t, err := count(ctx, e.db, run)
	if err != nil {
		return res, err
	}
	res.Duplicates, res.Losses, res.Credits, res.Commits = t.Duplicates, t.Losses, t.Rows, t.Commits
	if v == partitionedVariant {
		if res.Partitions, res.InDefault, err = partitionSpread(ctx, e.db, run); err != nil {
			return res, err
		}
	}
	for _, p := range procs {
		res.Skipped += p.count("skip ")
	}
	res.Elapsed = time.Since(start)
	return res, cleanup(ctx, e.db, run)
}

// waitWorking waits for p's first message. It reports drained instead when the group has nothing left to
// deliver, and fails when p exits or never starts.
func (e *env) waitWorking(ctx context.Context, run string, p *proc) (drained bool, err error) {
	// A replacement joins after the dead member's session expires, and Sarama may retry its join a few times.
	deadline := time.Now().Add(10*e.session + 30*time.Second)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-p.working:
			return false, nil
		case <-p.exited:
			return false, fmt.Errorf("consumer %s exited before working: %v", p.name, p.err)
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
			backlog, err := e.br.backlog(run, run)
			if err != nil {
				return false, err
			}
			if backlog == 0 {
				return true, nil
			}
			if time.Now().After(deadline) {
				return false, fmt.Errorf("consumer %s did not start working within %s", p.name, 10*e.session+30*time.Second)
			}
		}
	}
}

// crashResult is what a crash between commit and ack left behind.
type crashResult struct {
	Event      string // the event whose credit committed just before the crash
	Rows       int    // its ledger rows after the redelivery: 1 is right, 2 a duplicate
	SkippedRe  bool   // the inbox recognised its redelivery
	Duplicates int
	Losses     int
}

// crashRun places one kill exactly where the inbox earns its keep: a consumer kills itself (SIGKILL) right after
// the database commit of its crashAfter-th message and before the router acks it, so that message's offset is
// never committed; a second consumer then drains the topic and gets it again. Without the inbox the credit must
// land twice, or the harness could not see a duplicate at all.
func crashRun(ctx context.Context, e *env, v variant, events, crashAfter int, sleep time.Duration) (crashResult, error) {
	var res crashResult
	run := newRun("crash", v, 0)
	if err := e.br.createTopic(run, e.partitions); err != nil {
		return res, err
	}
	defer e.br.deleteTopic(run)
	if err := publishRun(ctx, e.db, e.br.addrs, run, run, events, e.accounts, rand.New(rand.NewPCG(7, 7)), v.publisherOptions()...); err != nil {
		return res, err
	}
	cfg := e.consumerConfig(v, run, run+"-crashing", sleep)
	cfg.CrashAfterCommit = crashAfter
	p, err := spawn(e.bin, e.logDir, cfg, nil)
	if err != nil {
		return res, err
	}
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		p.kill()
		return res, fmt.Errorf("consumer %s did not crash", p.name)
	}
	crashed := p.find("crash ")
	if len(crashed) != 1 {
		return res, fmt.Errorf("consumer %s exited (%v) without reporting its crash", p.name, p.err)
	}
	res.Event = crashed[0]
	final, err := spawn(e.bin, e.logDir, e.consumerConfig(v, run, run+"-after", sleep), nil)
	if err != nil {
		return res, err
	}
	if err := e.waitDrained(ctx, run, time.Second, 3*time.Minute, final.alive); err != nil {
		final.kill()
		return res, err
	}
	if err := final.stop(time.Minute); err != nil {
		return res, err
	}
	for _, id := range final.find("skip ") {
		if id == res.Event {
			res.SkippedRe = true
		}
	}
	writes, err := writesOf(ctx, e.db, run, []string{res.Event})
	if err != nil {
		return res, err
	}
	res.Rows = len(writes[res.Event])
	t, err := count(ctx, e.db, run)
	if err != nil {
		return res, err
	}
	res.Duplicates, res.Losses = t.Duplicates, t.Losses
	return res, cleanup(ctx, e.db, run)
}
