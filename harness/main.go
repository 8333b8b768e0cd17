// Command harness measures the inbox against the faults it exists for: hard kills, zombie consumers, a misbehaving
// database, and what it costs in throughput. Run `harness help` for the subcommands.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/effectively-once/watermill-inbox/inboxtest"
)

const usage = `harness: fault measurements of the watermill-inbox middleware.

Usage:

  harness <command> [flags]

Commands:

  kill        Publishes --events credit events with event IDs to a --partitions topic; a consumer subprocess is
              SIGKILLed --kills times per run, each after 1 to 8 seconds (seeded, the same for every variant) of
              work; a last consumer drains the topic. Counts duplicate credits and lost events per run for
              at-most-once (InstantAck), after-db (ack after the database commit, offsets auto-committed every
              second), after-db-sync (offset committed on every ack), inbox, batch (the inbox in batch mode,
              WithBatch: the messages in flight share one transaction), and inbox-partitioned (the inbox on a
              table of managed partitions, one an hour, WithPartitions, with UUIDv7 event IDs),
              inbox-atcommit (the inbox on pgx v5 with the claim sent with COMMIT, WithClaimAtCommit) and
              batch-pgx (batch mode on pgx v5, the members' first statements pipelined); the last three not run
              unless --variants names them.
  zombie      Three consumers; one message in --stall-every stalls, the first time it is handled, longer than
              the rebalance timeout. A member joins the group when a stall begins, as in a deploy, so a rebalance
              runs while the handler holds its message; the broker evicts the stalled member, its partitions move,
              and the stalled handler writes after the new owner received the same message. Counts evictions (seen
              by the broker), zombie writes and duplicate credits, without and with the inbox.
  db-faults   The inbox consumer while PostgreSQL misbehaves: its backends are terminated mid-transaction every
              --terminate-every, and the server is restarted --restarts times. The consumer is never restarted:
              it must recover by itself, with no duplicate and no loss. The server restarted is one the harness
              starts for the purpose (a new cluster in a temporary directory, on a free loopback port, run as the
              postgres user when the harness runs as root, removed at the end), never the one --dsn names unless
              --restart-cmd says how to restart it.
  throughput  No faults. Consumers over Kafka (kfake; one partition per message in flight), GoChannel (that
              many publishers, each waiting for its message's ack) and RabbitMQ (that many subscriptions of the
              queue, prefetch 1 each), at --in-flight messages in flight, with zero-work and 10 ms handlers: no
              inbox (after-db), the inbox per message (inbox), and in batch mode over database/sql (batch) and
              pgx (batch-pgx), beside a ceiling: the inbox's claim-plus-credit transaction, prepared, driven
              straight at PostgreSQL by one client per message in flight, as pgbench would. Every measurement in
              the same invocation, interleaved; medians over --runs rounds, and their ratios.
  storage     Bytes per remembered message ID, heap and index, for text, uuid v4 and uuid v7 keys.
  storage-mysql
              The inbox's bytes per row on MariaDB or MySQL (mysqlinbox), every index counted, beside PostgreSQL's.
  cleanup-latency  What the inbox's retention cleanup costs the claims running beside it. --claimers
              goroutines claim fresh messages through the middleware (one UPDATE per claim's transaction) and the
              claim latency's p50, p99 and max are read per scenario: idle (a table of --rows expired rows, no
              cleanup), batched delete (the same while Database.Cleanup deletes them, with its rate and time),
              partition drop (as many expired rows in hourly partitions of a WithPartitions table, beside a tenth
              as many live ones, while Database.Cleanup with WithPartitions drops those partitions; the claims carry
              UUIDv7 IDs), idle partitioned (that table with no cleanup) and growth (10,000 rows against
              --growth-rows rows). Prints p99 during each cleanup over
              p99 idle and p99 of the large table over the small one, and what the backends waited on meanwhile.
              --short is the form the harness's test runs, in seconds.
  scale       How the claim behaves as the inbox table grows to --sizes retained rows (10^5 to 10^8), idle and
              during the cleanup, for --variants uuid7 (UUIDv7 IDs as uuid, batched delete), uuid7-partitioned
              (hourly partitions, partition drop) and text (uniform string IDs, batched delete). Per variant and
              size: a fresh table, loaded with COPY in primary-key order with --expired-share expired rows and the
              live rows over the retention, settled; its bytes per row, primary-key depth and size on disk; claim
              p50, p99, p99.9, claims/s and buffer cache hit ratio over --measure idle and over the cleanup; the
              table dropped. Each result is a JSON record in --out, written as it completes, so a run can be split
              and resumed; every invocation rewrites --out/README.md's generated part and claim-p99.svg from all
              the records there, and --replot does only that. --short is the form the harness's test runs.
  curves      Draws no measurement of its own: reads --bench, the output of pgxinbox's benchmarks
              (go test -bench 'RouterWithoutInbox|BatchFloor'), and writes beside it curves.svg (throughput and
              client CPU per message against messages in flight, a line per mode) and README.md's generated part
              (the medians, and batch mode's ratios to the autocommit consumer and to the router plus the floor).
  transports  The same crash scenario over each transport a Watermill user picks: Kafka (kfake), RabbitMQ
              (watermill-amqp), NATS JetStream (watermill-nats), Redis Streams (watermill-redisstream),
              watermill-sql v3's and v4's PostgreSQL pub/sub, and GoChannel. Per cell, --events credit events and a
              --dup-rate share of them published again (same event ID, new message); the consumer subprocess is
              SIGKILLed --kills times mid-stream and restarted, a last consumer drains the queue, and effects are
              counted per event ID, with the inbox and without it. GoChannel's queue dies with its process, so its
              cell has no kills: handlers run concurrently and republished copies race their originals.
  broker      Runs kfake, the in-process Kafka-protocol broker, until interrupted, and prints its address.
  consume     The consumer subprocess the other commands start, over any transport (not for direct use).

Each command prints progress to stderr and a markdown table to stdout, and writes its chart (SVG) and table
to --out. Run 'harness <command> -h' for its flags. The broker is kfake in this process unless --brokers
names a real cluster.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch cmd {
	case "consume":
		err = consumeCommand(args)
	case "kill":
		err = killCommand(ctx, args)
	case "zombie":
		err = zombieCommand(ctx, args)
	case "db-faults":
		err = dbFaultsCommand(ctx, args)
	case "throughput":
		err = throughputCommand(ctx, args)
	case "storage":
		err = runStorage(args)
	case "storage-mysql":
		err = runStorageMySQL(args)
	case "cleanup-latency":
		err = cleanupLatencyCommand(ctx, args)
	case "scale":
		err = scaleCommand(ctx, args)
	case "curves":
		err = runCurves(args)
	case "transports":
		err = transportsCommand(ctx, args)
	case "broker":
		err = brokerCommand(ctx, args)
	case "help", "-h", "-help", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "harness: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		os.Exit(1)
	}
}

// newFlagSet returns the flag set of a command whose -h prints the command's paragraph of the usage, then its flags.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: harness %s [flags]\n\n%s\nFlags:\n", name, commandHelp(name))
		fs.PrintDefaults()
	}
	return fs
}

// commandHelp cuts a command's paragraph out of usage, so the two never disagree.
func commandHelp(name string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case strings.HasPrefix(line, "  "+name+" "):
			in = true
		case in && (len(line) < 3 || line[2] != ' '):
			return b.String()
		}
		if in {
			b.WriteString(strings.TrimSpace(line) + "\n")
		}
	}
	return b.String()
}

// commonFlags are the flags every measuring command takes.
type commonFlags struct {
	env     envConfig
	brokers string
	out     string
	runs    int
	seed    uint64
}

// groupTimeouts are a command's defaults for the consumer group's timeouts.
type groupTimeouts struct{ session, heartbeat, rebalance time.Duration }

// killTimeouts notice a SIGKILLed member in about a second; see env.go.
var killTimeouts = groupTimeouts{defaultSession, defaultHeartbeat, defaultRebalance}

// matrixTimeouts are the group timeouts of the Kafka consumers of the transports and throughput commands: kill's,
// with a rebalance timeout of 2 s.
var matrixTimeouts = groupTimeouts{defaultSession, defaultHeartbeat, 2 * time.Second}

func (c *commonFlags) register(fs *flag.FlagSet, defaultRuns int, t groupTimeouts) {
	fs.StringVar(&c.brokers, "brokers", "", "a real Kafka cluster, comma-separated host:port (default: kfake in this process)")
	fs.StringVar(&c.env.DSN, "dsn", defaultDSN, "PostgreSQL DSN (URL form)")
	fs.DurationVar(&c.env.Session, "session-timeout", t.session, "consumer group session timeout: how long a silent member keeps its partitions")
	fs.DurationVar(&c.env.Heartbeat, "heartbeat", t.heartbeat, "consumer group heartbeat interval")
	fs.DurationVar(&c.env.Rebalance, "rebalance-timeout", t.rebalance, "how long a rebalance waits for every member to rejoin before evicting it")
	fs.IntVar(&c.env.Partitions, "partitions", defaultPartitions, "partitions of each run's topic")
	fs.IntVar(&c.env.Accounts, "accounts", defaultAccounts, "accounts the credits are spread over")
	fs.StringVar(&c.env.LogDir, "logs", "", "directory for the consumers' logs (default: a new temporary directory)")
	fs.StringVar(&c.out, "out", ".", "directory for the chart and the table")
	fs.IntVar(&c.runs, "runs", defaultRuns, "runs per variant")
	fs.Uint64Var(&c.seed, "seed", 1, "seed of the kill schedule and of the events")
}

// open builds the env: the binary to re-execute is this one.
func (c *commonFlags) open(ctx context.Context) (*env, error) {
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c.env.Bin = bin
	c.env.Brokers = brokerList(c.brokers)
	c.env.Progress = os.Stderr
	if c.runs < 1 {
		return nil, errors.New("--runs must be at least 1")
	}
	e, err := newEnv(ctx, c.env)
	if err != nil {
		return nil, err
	}
	e.logf("broker %v, consumer logs in %s", e.br.addrs, e.logDir)
	return e, nil
}

func parseVariants(s string) ([]variant, error) {
	var out []variant
	for _, f := range strings.Split(s, ",") {
		v, err := parseVariant(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// writeOutputs prints the table and writes it, the chart and the per-run results (JSON, for anyone who wants to
// check a median or draw another chart) under dir.
func writeOutputs(dir, name, table, svg string, results any) error {
	fmt.Print(table)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	for ext, b := range map[string][]byte{".md": []byte(table), ".svg": []byte(svg), ".json": append(raw, '\n')} {
		if err := os.WriteFile(filepath.Join(dir, name+ext), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func killCommand(ctx context.Context, args []string) error {
	fs := newFlagSet("kill")
	var cf commonFlags
	cf.register(fs, 5, killTimeouts)
	var c killConfig
	variants := fs.String("variants", "at-most-once,after-db,after-db-sync,inbox,batch", "variants to measure, comma-separated")
	fs.IntVar(&c.Kills, "kills", 20, "hard kills per run")
	fs.IntVar(&c.Events, "events", 40000, "credit events per run")
	fs.DurationVar(&c.MinWork, "min-work", time.Second, "shortest work before a kill")
	fs.DurationVar(&c.MaxWork, "max-work", 8*time.Second, "longest work before a kill")
	fs.DurationVar(&c.Sleep, "sleep", 10*time.Millisecond, "handler work per message")
	fs.DurationVar(&c.Drain, "drain-timeout", 5*time.Minute, "how long the last consumer may take to drain a run")
	c.Batch = defaultBatch
	c.Batch.register(fs)
	_ = fs.Parse(args)
	var err error
	if c.Variants, err = parseVariants(*variants); err != nil {
		return err
	}
	if err := c.Batch.validate(); err != nil {
		return err
	}
	if c.MaxWork < c.MinWork {
		return errors.New("--max-work must not be shorter than --min-work")
	}
	c.Runs, c.Seed = cf.runs, cf.seed
	e, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer e.close()
	start := time.Now()
	res, err := runKill(ctx, e, c)
	if err != nil {
		return err
	}
	e.logf("kill: done in %s", time.Since(start).Round(time.Second))
	table, svg := killReport(c, res)
	return writeOutputs(cf.out, "kill", table, svg, res)
}

func brokerCommand(ctx context.Context, args []string) error {
	fs := newFlagSet("broker")
	minSession := fs.Duration("min-session-timeout", 100*time.Millisecond, "the shortest session timeout the broker accepts")
	_ = fs.Parse(args)
	b, err := startBroker(nil, *minSession)
	if err != nil {
		return err
	}
	defer b.close()
	fmt.Println(joinComma(b.addrs))
	<-ctx.Done()
	return nil
}

func zombieCommand(ctx context.Context, args []string) error {
	fs := newFlagSet("zombie")
	var cf commonFlags
	cf.register(fs, 5, zombieTimeouts)
	var c zombieConfig
	variants := fs.String("variants", "after-db-sync,inbox", "variants to measure, comma-separated: without the inbox, and with it")
	fs.IntVar(&c.Events, "events", 5000, "credit events per run")
	fs.IntVar(&c.Consumers, "consumers", 3, "consumers in the group")
	fs.IntVar(&c.StallEvery, "stall-every", 500, "one message in this many stalls, the first time it is handled")
	fs.DurationVar(&c.StallFor, "stall-for", 0, "how long a stall lasts (default: the rebalance timeout plus 4s)")
	fs.DurationVar(&c.Sleep, "sleep", 10*time.Millisecond, "handler work per message")
	fs.DurationVar(&c.Drain, "drain-timeout", 10*time.Minute, "how long a run may take")
	_ = fs.Parse(args)
	var err error
	if c.Variants, err = parseVariants(*variants); err != nil {
		return err
	}
	if c.StallEvery < 1 || c.Events < c.StallEvery {
		return errors.New("--stall-every must be between 1 and --events")
	}
	if c.StallFor == 0 {
		c.StallFor = cf.env.Rebalance + 4*time.Second
	}
	if c.StallFor <= cf.env.Rebalance {
		return errors.New("--stall-for must be longer than --rebalance-timeout, or no member is ever evicted")
	}
	if cf.brokers == "" && cf.env.Session < cf.env.Rebalance+2*time.Second {
		return errors.New("with kfake, --session-timeout must exceed --rebalance-timeout by 2s or more: kfake drops a member " +
			"that waits in a rebalance for longer than its session timeout, without answering its JoinGroup (see zombieTimeouts)")
	}
	c.Runs, c.Seed = cf.runs, cf.seed
	e, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer e.close()
	start := time.Now()
	res, err := runZombie(ctx, e, c)
	if err != nil {
		return err
	}
	e.logf("zombie: done in %s", time.Since(start).Round(time.Second))
	table, svg := zombieReport(c, e, res)
	return writeOutputs(cf.out, "zombie", table, svg, res)
}

func dbFaultsCommand(ctx context.Context, args []string) error {
	fs := newFlagSet("db-faults")
	var cf commonFlags
	cf.register(fs, 3, killTimeouts)
	var c dbFaultsConfig
	variants := fs.String("variants", "inbox", "variants to measure, comma-separated")
	fs.IntVar(&c.Events, "events", 20000, "credit events per run")
	fs.DurationVar(&c.Sleep, "sleep", 10*time.Millisecond, "handler work per message")
	fs.DurationVar(&c.TerminateEvery, "terminate-every", time.Second, "mean interval between terminations of the consumer's backends that are in a transaction")
	fs.IntVar(&c.Restarts, "restarts", 2, "PostgreSQL restarts per run")
	restartCmd := fs.String("restart-cmd", "", "shell command that restarts the server --dsn names "+
		"(default: none; the harness starts a server of its own and restarts that)")
	fs.DurationVar(&c.Drain, "drain-timeout", 10*time.Minute, "how long a run may take")
	_ = fs.Parse(args)
	var err error
	if c.Variants, err = parseVariants(*variants); err != nil {
		return err
	}
	if c.TerminateEvery <= 0 {
		return errors.New("--terminate-every must be positive")
	}
	dsnGiven := false
	fs.Visit(func(f *flag.Flag) { dsnGiven = dsnGiven || f.Name == "dsn" })
	var private *inboxtest.PostgresServer
	switch {
	case c.Restarts == 0:
		// Terminations only: the server --dsn names is used as it is.
	case *restartCmd != "":
		c.Restart = shellRestart(*restartCmd)
	case dsnGiven:
		return errors.New("--dsn names a server the harness did not start, and the harness restarts no such server " +
			"on its own: give --restart-cmd for it, or --restarts 0, or leave --dsn out to use a server the harness starts")
	default:
		if private, err = inboxtest.StartPostgres(ctx); err != nil {
			return fmt.Errorf("start a PostgreSQL server to restart: %w", err)
		}
		defer func() {
			if err := private.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "harness: stop the private PostgreSQL server:", err)
			}
		}()
		cf.env.DSN, c.Restart = private.DSN(), private.Restart
	}
	c.Runs, c.Seed = cf.runs, cf.seed
	e, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer e.close()
	if private != nil {
		e.logf("PostgreSQL for this measurement: %s, started by the harness in %s", private.DSN(), private.Dir())
	}
	start := time.Now()
	res, err := runDBFaults(ctx, e, c)
	if err != nil {
		return err
	}
	e.logf("db-faults: done in %s", time.Since(start).Round(time.Second))
	table, svg := dbFaultsReport(c, res)
	return writeOutputs(cf.out, "db-faults", table, svg, res)
}

// throughputAccounts is the throughput command's default --accounts.
const throughputAccounts = 100000

func throughputCommand(ctx context.Context, args []string) error {
	fs := newFlagSet("throughput")
	var cf commonFlags
	cf.register(fs, 5, matrixTimeouts)
	// Spread the credits over many accounts, so that the measurement is of the consumers, not of row locks: with the
	// other commands' 100, concurrent batches deadlock on them from 32 in flight (docs/results/performance.md). --accounts 100
	// measures that.
	cf.env.Accounts = throughputAccounts
	fs.Lookup("accounts").DefValue = strconv.Itoa(throughputAccounts)
	c := throughputConfig{Batch: defaultBatch}
	transports := fs.String("transports", joinTransports(throughputTransports), "transports to measure, comma-separated (kafka, gochannel, amqp, and kafka-pgx: kafka with the consumer on pgx v5)")
	variants := fs.String("variants", "after-db,inbox,batch,batch-pgx", "variants to measure, comma-separated; after-db-sync runs over kafka only")
	inFlight := fs.String("in-flight", "1,8,32,64", "messages in flight, comma-separated; each is a row of the tables (for kafka, the topic's partitions)")
	sleeps := fs.String("sleeps", "0s,10ms", "handler work per message before its first statement, comma-separated; 0s is the zero-work handler")
	fs.IntVar(&c.PerSlot, "per-slot", 500, "messages per measurement for each message in flight...")
	fs.IntVar(&c.Messages, "messages", 20000, "...and at most this many per measurement")
	fs.BoolVar(&c.Ceiling, "ceiling", true, "measure the PostgreSQL-only ceiling beside the consumers")
	fs.IntVar(&c.Pool, "pool", 0, "database connections of each consumer and of the ceiling (default: one per message in flight)")
	fs.StringVar(&c.AMQP, "amqp", defaultAMQPURL, "RabbitMQ URL")
	fs.DurationVar(&c.Timeout, "timeout", 20*time.Minute, "how long one measurement may take")
	c.Batch.register(fs)
	_ = fs.Parse(args)
	var err error
	if c.Transports, err = parseTransports(*transports); err != nil {
		return err
	}
	if c.Variants, err = parseVariants(*variants); err != nil {
		return err
	}
	for _, kind := range c.Transports {
		for _, v := range c.Variants {
			if err := validThroughputVariant(kind, v); err != nil {
				return fmt.Errorf("--transports %s with --variants %s: %w", kind, v, err)
			}
		}
	}
	for _, s := range strings.Split(*inFlight, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("--in-flight: bad count %q", s)
		}
		c.InFlight = append(c.InFlight, n)
	}
	for _, s := range strings.Split(*sleeps, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			return fmt.Errorf("--sleeps: bad duration %q", s)
		}
		c.Sleeps = append(c.Sleeps, d)
	}
	if c.PerSlot < 1 || c.Messages < 1 {
		return errors.New("--per-slot and --messages must be positive")
	}
	if err := c.Batch.validate(); err != nil {
		return err
	}
	c.Runs, c.Seed, c.Accounts = cf.runs, cf.seed, cf.env.Accounts
	e, err := cf.open(ctx)
	if err != nil {
		return err
	}
	defer e.close()
	start := time.Now()
	res, err := runThroughput(ctx, e, c)
	if err != nil {
		return err
	}
	e.logf("throughput: done in %s", time.Since(start).Round(time.Second))
	table, svg := throughputReport(c, res)
	return writeOutputs(cf.out, "throughput", table, svg, res)
}
