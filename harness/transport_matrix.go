package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	inbox "github.com/effectively-once/watermill-inbox"
)

// transportsConfig is one `harness transports` invocation.
type transportsConfig struct {
	Transports []transportKind
	Variants   []variant // inbox, and after-db: the same consumer without the inbox
	Runs       int
	Events     int           // distinct credit events per cell
	DupRate    float64       // share of events published a second time: same event ID, new message
	Kills      int           // hard kills per cell (none for gochannel)
	Stop       stopMode      // how each kill stops the consumer: SIGKILL, or SIGTERM for a graceful close mid-work
	MinWork    time.Duration // each kill lands this long or longer after the consumer started working...
	MaxWork    time.Duration // ...and no longer than this
	Sleep      time.Duration // handler work per message
	Settle     time.Duration // how long a drained consumer must stay idle before it is stopped
	Drain      time.Duration // how long the last consumer may take to drain a cell
	Seed       uint64
	Addrs      transportAddrs
}

// transportResult is one run of one cell.
type transportResult struct {
	Transport  transportKind
	Variant    variant
	Run        int
	Events     int   // distinct events published
	Copies     int   // republished copies among the messages
	Kills      int   // kills that landed while the consumer worked
	Unclean    int   // of them, with --stop term: consumers that exited with an error instead of closing cleanly
	Duplicates int   // ledger rows beyond the first per event ID
	Losses     int   // events without a ledger row
	Skipped    int   // deliveries the inbox recognised and skipped
	Drained    bool  // every event credited, and the broker held nothing unacked once the last consumer closed
	Left       int64 // what the broker still held after the last consumer closed
	Elapsed    time.Duration
}

// Redeliveries is the duplicates beyond the republished copies: extra effects the transport's redeliveries caused.
// It is meaningful without the inbox, where every copy lands as an effect of its own.
func (r transportResult) Redeliveries() int { return max(0, r.Duplicates-r.Copies) }

// stopMode is how the matrix stops a consumer at each point of its kill schedule.
type stopMode string

const (
	// stopKill is SIGKILL, the matrix's crash: no deferred function, no close, no last commit.
	stopKill stopMode = "kill"
	// stopTerm is SIGTERM: the consumer closes its router while its handlers are still at work, as a deployment's
	// rolling restart does. The router closes the subscriber at once and then waits for the handlers.
	stopTerm stopMode = "term"
)

// transportEvents makes n credit events with their event IDs, and the message sequence to publish: every event
// once, and a share dupRate of them a second time, as a new message (new UUID) with the same event ID, a few
// places to a few hundred places later, as a producer's retry or a relay's resend would.
func transportEvents(n, accounts int, dupRate float64, rnd *rand.Rand) ([]*message.Message, []event, int) {
	orig, evs := newEvents(n, accounts, rnd)
	later := make(map[int][]*message.Message)
	copies := 0
	for i, m := range orig {
		m.Metadata.Set(inbox.DefaultIDMetadataKey, m.UUID)
		evs[i].ID = m.UUID
		if rnd.Float64() < dupRate {
			c := message.NewMessage(watermill.NewUUID(), m.Payload)
			for k, v := range m.Metadata {
				c.Metadata.Set(k, v)
			}
			at := i + 1 + rnd.IntN(min(200, n))
			later[at] = append(later[at], c)
			copies++
		}
	}
	out := make([]*message.Message, 0, n+copies)
	for i := range n + 200 + 1 {
		if i < n {
			out = append(out, orig[i])
		}
		out = append(out, later[i]...)
	}
	return out, evs, copies
}

// runTransports runs every cell Runs times, cells one after another: transport by transport, variant by variant.
func runTransports(ctx context.Context, e *env, c transportsConfig) ([]transportResult, error) {
	schedule := killSchedule(killConfig{Runs: c.Runs, Kills: c.Kills, MinWork: c.MinWork, MaxWork: c.MaxWork, Seed: c.Seed})
	var results []transportResult
	for _, kind := range c.Transports {
		tr, err := openTransport(ctx, kind, e, c.Addrs)
		if err != nil {
			return results, fmt.Errorf("%s: %w", kind, err)
		}
		for r := range c.Runs {
			for _, v := range c.Variants {
				res, err := runTransportCell(ctx, e, tr, kind, c, v, r, schedule[r])
				if err != nil {
					tr.close()
					return results, fmt.Errorf("%s %s run %d: %w", kind, v, r+1, err)
				}
				stops := fmt.Sprintf("%d kills", res.Kills)
				if c.Stop == stopTerm {
					stops = fmt.Sprintf("%d SIGTERM stops (%d unclean)", res.Kills, res.Unclean)
				}
				e.logf("%s %s run %d/%d: %d events (+%d copies), %s, %d duplicates (%d beyond the copies), %d lost, %d skipped, drained %v (%s)",
					kind, v, r+1, c.Runs, res.Events, res.Copies, stops, res.Duplicates, res.Redeliveries(), res.Losses,
					res.Skipped, res.Drained, res.Elapsed.Round(100*time.Millisecond))
				results = append(results, res)
			}
		}
		tr.close()
	}
	return results, nil
}

// runTransportCell publishes the run's messages, then starts a consumer and SIGKILLs it after each delay of the
// schedule, counted from its first message; a last consumer drains the queue and closes gracefully, and the ledger
// is counted per event ID. GoChannel is the exception: its queue lives in the consumer's memory, so a kill there
// loses the queue with the process, which says nothing of the consumer. Its cell is crash-free: the process
// publishes every message to itself, and handlers run concurrently, a republished copy racing its original.
func runTransportCell(ctx context.Context, e *env, tr transport, kind transportKind, c transportsConfig, v variant, r int, delays []time.Duration) (transportResult, error) {
	start := time.Now()
	run := newRun("tr-"+string(kind), v, r)
	res := transportResult{Transport: kind, Variant: v, Run: r}
	if err := tr.prepare(ctx, run); err != nil {
		return res, fmt.Errorf("prepare %s: %w", run, err)
	}
	defer func() {
		if err := tr.remove(context.WithoutCancel(ctx), run); err != nil {
			e.logf("  %s: remove: %v", run, err)
		}
	}()
	rnd := rand.New(rand.NewPCG(c.Seed+uint64(r), 2))
	msgs, evs, copies := transportEvents(c.Events, e.accounts, c.DupRate, rnd)
	res.Events, res.Copies = len(evs), copies
	if err := seedRun(ctx, e.db, run, e.accounts, evs); err != nil {
		return res, fmt.Errorf("seed run %s: %w", run, err)
	}
	defer func() {
		if err := cleanup(context.WithoutCancel(ctx), e.db, run); err != nil {
			e.logf("  %s: %v", run, err)
		}
	}()
	cfg := func(name string) consumerConfig {
		cc := e.consumerConfig(v, run, name, c.Sleep)
		cc.Transport, cc.Addr = kind, tr.addr()
		return cc
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			if p.alive() {
				p.kill()
			}
		}
	}()
	if kind == goChannel {
		file := filepath.Join(e.logDir, run+".messages")
		if err := writeMessagesFile(file, msgs); err != nil {
			return res, err
		}
		cc := cfg(run + "-only")
		cc.Messages, cc.Expect = file, len(msgs)
		p, err := spawn(e.bin, e.logDir, cc, nil)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
		if err := waitLine(ctx, p, "done ", c.Drain); err != nil {
			return res, err
		}
		if err := p.stop(time.Minute); err != nil {
			return res, err
		}
		res.Drained = true
		return finishCell(ctx, e, run, res, procs, start)
	}

	if err := tr.publish(ctx, run, msgs); err != nil {
		return res, fmt.Errorf("publish to %s: %w", run, err)
	}
	for k, d := range delays {
		cc := cfg(fmt.Sprintf("%s-life%d", run, k+1))
		p, err := spawn(e.bin, e.logDir, cc, nil)
		if err != nil {
			return res, err
		}
		procs = append(procs, p)
		drained, err := waitWorkingOn(ctx, tr, run, p)
		if err != nil {
			return res, err
		}
		if drained {
			p.kill()
			e.logf("  %s: nothing left to deliver after %d kills", run, res.Kills)
			break
		}
		time.Sleep(d)
		how := "kill"
		if c.Stop == stopTerm {
			how = "SIGTERM"
			if err := p.stop(time.Minute); err != nil {
				res.Unclean++
				how = fmt.Sprintf("SIGTERM, unclean exit: %v", err)
			}
		} else {
			p.kill()
		}
		res.Kills++
		rows, _ := ledgerRows(ctx, e.db, run)
		e.logf("  %s: %s %d/%d after %.1fs of work (%d ledger rows)", run, how, k+1, len(delays), d.Seconds(), rows)
	}
	final := cfg(run + "-final")
	p, err := spawn(e.bin, e.logDir, final, nil)
	if err != nil {
		return res, err
	}
	procs = append(procs, p)
	credited, err := waitIdle(ctx, e, tr, run, p, c.Settle, c.Drain)
	if err != nil {
		return res, err
	}
	if err := p.stop(time.Minute); err != nil {
		return res, fmt.Errorf("final consumer of %s: %w", run, err)
	}
	if res.Left, err = tr.backlog(ctx, run); err != nil {
		return res, err
	}
	res.Drained = credited && res.Left == 0
	return finishCell(ctx, e, run, res, procs, start)
}

func finishCell(ctx context.Context, e *env, run string, res transportResult, procs []*proc, start time.Time) (transportResult, error) {
	t, err := count(ctx, e.db, run)
	if err != nil {
		return res, err
	}
	res.Duplicates, res.Losses = t.Duplicates, t.Losses
	for _, p := range procs {
		res.Skipped += p.count("skip ")
	}
	res.Elapsed = time.Since(start)
	return res, nil
}

// waitWorkingOn waits for p's first message, or reports drained when the broker has nothing left to deliver.
func waitWorkingOn(ctx context.Context, tr transport, run string, p *proc) (drained bool, err error) {
	const limit = 40 * time.Second // a Kafka replacement first waits out its dead predecessor's session
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(100 * time.Millisecond)
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
			backlog, err := tr.backlog(ctx, run)
			if err != nil {
				return false, err
			}
			if backlog == 0 {
				return true, nil
			}
			if time.Now().After(deadline) {
				return false, fmt.Errorf("consumer %s did not start working within %s", p.name, limit)
			}
		}
	}
}

// waitIdle waits until every event of the run has a ledger row, the broker reports no backlog, and neither the
// ledger nor p's report lines have moved for settle. A transport whose redelivery waits on a timer (a JetStream
// ack wait, a Redis claim) holds messages in its backlog until then. credited is false when the wait timed out
// with events still missing; the caller then counts what it has.
func waitIdle(ctx context.Context, e *env, tr transport, run string, p *proc, settle, timeout time.Duration) (credited bool, err error) {
	var events int
	if err := e.db.QueryRowContext(ctx, `SELECT count(*) FROM harness_events WHERE run_id = $1`, run).Scan(&events); err != nil {
		return false, err
	}
	deadline := time.Now().Add(timeout)
	lastRows, lastLines, lastChange := -1, -1, time.Now()
	for {
		if !p.alive() {
			return false, fmt.Errorf("run %s: the consumer exited before the queue was drained: %v", run, p.err)
		}
		backlog, err := tr.backlog(ctx, run)
		if err != nil {
			return false, err
		}
		rows, err := ledgerRows(ctx, e.db, run)
		if err != nil {
			return false, err
		}
		done, err := creditedEvents(ctx, e.db, run)
		if err != nil {
			return false, err
		}
		lines := p.count("")
		if rows != lastRows || lines != lastLines {
			lastRows, lastLines, lastChange = rows, lines, time.Now()
		}
		if done == events && backlog == 0 && time.Since(lastChange) >= settle {
			return true, nil
		}
		if time.Now().After(deadline) {
			e.logf("  %s: not drained after %s: %d of %d events credited, backlog %d", run, timeout, done, events, backlog)
			return false, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLine waits for a report line of p that starts with prefix.
func waitLine(ctx context.Context, p *proc, prefix string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if len(p.find(prefix)) > 0 {
			return nil
		}
		if errs := p.find("error "); len(errs) > 0 {
			return fmt.Errorf("consumer %s: %s", p.name, errs[0])
		}
		if !p.alive() {
			return fmt.Errorf("consumer %s exited before %q: %v", p.name, prefix, p.err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("consumer %s: no %q line within %s", p.name, strings.TrimSpace(prefix), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// transportsReport renders the matrix: one row per transport and variant, summed over runs.
func transportsReport(c transportsConfig, res []transportResult) string {
	var b strings.Builder
	kills := "Kills"
	if c.Stop == stopTerm {
		kills = "SIGTERM stops (unclean exits)"
	}
	fmt.Fprintf(&b, "| Transport | Variant | Runs | Events | Republished copies | %s | Duplicate effects | of them redeliveries | Lost | Skipped by the inbox | Drained |\n", kills)
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, kind := range c.Transports {
		for _, v := range c.Variants {
			var sum transportResult
			runs, drained := 0, 0
			for _, r := range res {
				if r.Transport != kind || r.Variant != v {
					continue
				}
				runs++
				sum.Events += r.Events
				sum.Copies += r.Copies
				sum.Kills += r.Kills
				sum.Unclean += r.Unclean
				sum.Duplicates += r.Duplicates
				sum.Losses += r.Losses
				sum.Skipped += r.Skipped
				if r.Drained {
					drained++
				}
			}
			if runs == 0 {
				continue
			}
			kills := fmt.Sprint(sum.Kills)
			if c.Stop == stopTerm {
				kills = fmt.Sprintf("%d (%d)", sum.Kills, sum.Unclean)
			}
			if kind == goChannel {
				kills = "none (in-process queue)"
			}
			name := string(v)
			if v == afterDB {
				name = "no inbox"
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %s | %d | %d | %d | %d | %d/%d |\n",
				kind, name, runs, sum.Events, sum.Copies, kills, sum.Duplicates, sum.Redeliveries(), sum.Losses, sum.Skipped, drained, runs)
		}
	}
	return b.String()
}

func transportsCommand(ctx context.Context, args []string) error {
	fs := newFlagSet("transports")
	var c transportsConfig
	dsn := fs.String("dsn", defaultDSN, "PostgreSQL DSN (URL form)")
	transports := fs.String("transports", joinTransports(allTransports), "transports to measure, comma-separated")
	variants := fs.String("variants", "inbox,after-db", "variants, comma-separated: inbox, and after-db (the same consumer without the inbox)")
	fs.IntVar(&c.Runs, "runs", 1, "runs per cell")
	fs.IntVar(&c.Events, "events", 2000, "distinct credit events per run")
	fs.Float64Var(&c.DupRate, "dup-rate", 0.2, "share of events published twice, as a new message with the same event ID")
	fs.IntVar(&c.Kills, "kills", 5, "hard kills per run (not for gochannel)")
	stop := fs.String("stop", string(stopKill), "how each kill stops the consumer: kill (SIGKILL) or term (SIGTERM: a graceful close with handlers at work)")
	fs.DurationVar(&c.MinWork, "min-work", 500*time.Millisecond, "shortest work before a kill")
	fs.DurationVar(&c.MaxWork, "max-work", 2*time.Second, "longest work before a kill")
	fs.DurationVar(&c.Sleep, "sleep", 5*time.Millisecond, "handler work per message")
	fs.DurationVar(&c.Settle, "settle", 1500*time.Millisecond, "how long the last consumer must stay idle before it is stopped")
	fs.DurationVar(&c.Drain, "drain-timeout", 3*time.Minute, "how long the last consumer may take to drain a run")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the kill schedule and of the events")
	fs.StringVar(&c.Addrs.AMQP, "amqp", defaultAMQPURL, "RabbitMQ URL")
	fs.StringVar(&c.Addrs.NATS, "nats", defaultNATSURL, "NATS URL (JetStream enabled)")
	fs.StringVar(&c.Addrs.Redis, "redis", defaultRedisAddr, "Redis host:port")
	logDir := fs.String("logs", "", "directory for the consumers' logs (default: a new temporary directory)")
	out := fs.String("out", ".", "directory for the table")
	_ = fs.Parse(args)
	var err error
	if c.Transports, err = parseTransports(*transports); err != nil {
		return err
	}
	if c.Variants, err = parseVariants(*variants); err != nil {
		return err
	}
	for _, v := range c.Variants {
		if v != inboxVariant && v != afterDB {
			return fmt.Errorf("--variants: %s is not one of the matrix (inbox, after-db)", v)
		}
	}
	if c.Stop = stopMode(*stop); c.Stop != stopKill && c.Stop != stopTerm {
		return fmt.Errorf("--stop: %q is neither kill nor term", *stop)
	}
	if c.Runs < 1 || c.Events < 1 || c.MaxWork < c.MinWork || c.DupRate < 0 || c.DupRate > 1 {
		return errors.New("--runs and --events must be positive, --max-work at least --min-work, --dup-rate within [0, 1]")
	}
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	e, err := newEnv(ctx, envConfig{Bin: bin, LogDir: *logDir, DSN: *dsn, Progress: os.Stderr,
		Session: matrixTimeouts.session, Heartbeat: matrixTimeouts.heartbeat, Rebalance: matrixTimeouts.rebalance,
		Partitions: defaultPartitions, Accounts: defaultAccounts})
	if err != nil {
		return err
	}
	defer e.close()
	e.logf("consumer logs in %s", e.logDir)
	start := time.Now()
	res, err := runTransports(ctx, e, c)
	if err != nil {
		return err
	}
	e.logf("transports: done in %s", time.Since(start).Round(time.Second))
	table := transportsReport(c, res)
	fmt.Print(table)
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "transports.json"), append(raw, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(*out, "transports.md"), []byte(table), 0o644)
}

func joinTransports(ts []transportKind) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ",")
}
