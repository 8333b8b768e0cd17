// Command watermill-inbox runs the operations of a watermill-inbox table from a terminal or a cron job: create or
// upgrade it, delete expired rows, show what it holds, and forget one message so it can be replayed.
// Run `watermill-inbox help` for the commands, their flags and the exit codes.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
)

// Exit codes, the contract with scripts.
const (
	exitOK        = 0 // done; for cleanup, also when another instance held the lock and this one skipped
	exitError     = 1 // the database failed, was unreachable, or the command was interrupted
	exitUsage     = 2 // unknown command, bad flag or missing flag
	exitNotFound  = 3 // forget: no row for that consumer and ID
	exitShort     = 4 // stats --warn-below: a consumer remembers less than that
	exitLeaseHeld = 5 // forget: the row's lease is live; retry later, or --force
)

const usage = `watermill-inbox: operate the inbox table of github.com/effectively-once/watermill-inbox.

The inbox remembers, in one PostgreSQL table, the event IDs each consumer has applied, so that a redelivered
copy is skipped. This tool creates that table, keeps it from growing forever, shows what it holds, and lets you
remove one message's row so the message can be applied again.

Usage:

  watermill-inbox <command> [flags]

Commands:

  migrate   Create the inbox table, or upgrade it to this version's schema. Safe to run from many places at
            once, and again and again: each migration is applied once.
  cleanup   Delete the rows older than --window (default 14d), in batches of --batch rows, until none is left.
            Unfinished lease-mode rows ('processing') are never deleted. Run it from cron; when several
            instances run it at once, one cleans and the others skip.
  stats     Show, per consumer, the rows by state and how far back the inbox remembers, the table's size on
            disk, and how many new consumer names it can still register. Reads the whole table: seconds per
            ten million rows.
  forget    Delete the row of one message (--consumer and --id), so its next copy is applied again. Prints
            what the row held.
  help      Show this text. 'watermill-inbox <command> -h' shows a command's flags.

Every command takes:

  --dsn URL       PostgreSQL connection URL. Default: $DATABASE_URL; when that is empty, the PG* environment
                  variables (PGHOST, PGUSER, PGDATABASE, ...) and localhost:5432.
  --table NAME    The inbox table (default watermill_inbox), as given to inbox.WithTable.

Durations take Go's units (90m, 36h) and days: 14d, 1d12h.

Exit codes:

  0  done (cleanup also exits 0 when another instance was cleaning and this one skipped)
  1  error: the database failed or was unreachable, or the command was interrupted
  2  usage: unknown command, bad or missing flag
  3  forget: there is no row for that consumer and ID
  4  stats --warn-below: some consumer remembers less than the given window
  5  forget: the row is being processed under a live lease; retry later, or use --force

Examples:

  watermill-inbox migrate --dsn "$DATABASE_URL"
  watermill-inbox cleanup --window 31d --batch 5000
  watermill-inbox stats --warn-below 7d || echo "the inbox forgets too early"
  watermill-inbox forget --consumer wallet-credits --id evt-2

A cron line that cleans every hour, with a lock of its own so a slow run is never doubled on one host:

  17 * * * *  flock -n /tmp/watermill-inbox.lock watermill-inbox cleanup --window 14d >>/var/log/watermill-inbox.log 2>&1
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command, apart from the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	commands := map[string]func(context.Context, *common, []string, io.Writer, io.Writer) int{
		"migrate": migrateCommand,
		"cleanup": cleanupCommand,
		"stats":   statsCommand,
		"forget":  forgetCommand,
	}
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	f, ok := commands[cmd]
	if !ok {
		fmt.Fprintf(stderr, "watermill-inbox: unknown command %q; run 'watermill-inbox help'\n", cmd)
		return exitUsage
	}
	return f(ctx, &common{name: cmd, stderr: stderr}, args, stdout, stderr)
}

// common holds the flags every command takes and what they open.
type common struct {
	name   string
	stderr io.Writer
	dsn    string
	table  string
	fs     *flag.FlagSet
}

// flags returns the command's flag set with --dsn and --table on it.
func (c *common) flags(summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: watermill-inbox %s [flags]\n\n%s\n\nFlags:\n", c.name, summary)
		fs.PrintDefaults()
		fmt.Fprint(fs.Output(), "\nExit codes: see 'watermill-inbox help'.\n")
	}
	// Not os.Getenv as the default: the flag package would print a DSN's password in -h.
	fs.StringVar(&c.dsn, "dsn", "", "PostgreSQL connection URL (default $DATABASE_URL, else the PG* variables and localhost:5432)")
	fs.StringVar(&c.table, "table", inbox.DefaultTable, "the inbox table")
	c.fs = fs
	return fs
}

// parse parses args, and returns the exit code to stop with, or -1 to go on. -h is not an error.
func (c *common) parse(args []string) int {
	err := c.fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return exitUsage // the flag package has printed the problem and the usage
	case c.fs.NArg() > 0:
		c.usageError("unexpected argument %q", c.fs.Arg(0))
		return exitUsage
	}
	// The library decides which names are valid; asking it here, before any connection, lets the complaint name
	// the flag instead of the Go option it would otherwise name.
	if _, err := inbox.OnSQL(nil).Migrations(inbox.WithTable(c.table)); err != nil {
		c.usageError("--table %q: want a table name of lower-case letters, digits and underscores, "+
			"not starting with a digit, at most 48 characters", c.table)
		return exitUsage
	}
	return -1
}

func (c *common) usageError(format string, a ...any) {
	fmt.Fprintf(c.stderr, "watermill-inbox %s: %s\n", c.name, fmt.Sprintf(format, a...))
	c.fs.Usage()
}

// fail reports err and returns the exit code for it.
func (c *common) fail(err error) int {
	fmt.Fprintf(c.stderr, "watermill-inbox %s: %s\n", c.name, c.describe(err))
	switch {
	case errors.Is(err, inbox.ErrInvalidOption):
		return exitUsage
	case errors.Is(err, inbox.ErrNotFound):
		return exitNotFound
	case errors.Is(err, inbox.ErrLeaseHeld):
		return exitLeaseHeld
	}
	return exitError
}

// describe words an error for someone at a terminal. What the user fixes with a command gets a sentence naming
// that command; any other error is the library's own message, with its package prefix said once (the command's
// prefix already says where it comes from) rather than at every layer that wrapped it.
func (c *common) describe(err error) string {
	if errors.Is(err, inbox.ErrSchemaMissing) {
		migrate := "watermill-inbox migrate"
		if c.table != inbox.DefaultTable {
			migrate += " --table " + c.table
		}
		return fmt.Sprintf("table %s does not exist in this database: create it with '%s' (and the same --dsn)", c.table, migrate)
	}
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "inbox: "), ": inbox: ", ": ")
}

// open connects and checks the connection, so that a wrong DSN is reported as such before any work.
func (c *common) open(ctx context.Context) (*sql.DB, error) {
	dsn := c.dsn
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("%w: --dsn: %w", inbox.ErrInvalidOption, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return db, nil
}

// logger writes the library's log lines (what cleanup did, what forget removed) to stderr; when quiet, nothing.
func (c *common) logger(quiet bool) watermill.LoggerAdapter {
	if quiet {
		return watermill.NopLogger{}
	}
	return watermill.NewStdLoggerWithOut(c.stderr, false, false)
}

func migrateCommand(ctx context.Context, c *common, args []string, stdout, _ io.Writer) int {
	fs := c.flags("Creates the inbox table, or upgrades it to this version's schema, in one transaction.")
	idType := fs.String("id-type", string(inbox.IDTypeText), "column type of new tables' event IDs: text, or uuid when every producer sends UUIDs (ignored for a table that exists)")
	var partitions days
	fs.Var(&partitions, "partitions", "create a new table as partitions of this period of UUIDv7 time (with --id-type uuid; give cleanup the same flag); default none")
	if code := c.parse(args); code >= 0 {
		return code
	}
	if _, err := inbox.OnSQL(nil).Migrations(inbox.WithIDType(inbox.IDType(*idType))); err != nil {
		c.usageError("--id-type %q: want %s or %s", *idType, inbox.IDTypeText, inbox.IDTypeUUID)
		return exitUsage
	}
	opts := []inbox.MaintenanceOption{inbox.WithTable(c.table), inbox.WithIDType(inbox.IDType(*idType))}
	if partitions != 0 {
		opts = append(opts, inbox.WithPartitions(time.Duration(partitions)))
		if _, err := inbox.OnSQL(nil).Migrations(opts...); err != nil {
			c.usageError("--partitions %s: %v", partitions, err)
			return exitUsage
		}
	}
	ms, err := inbox.OnSQL(nil).Migrations(opts...)
	if err != nil {
		return c.fail(err)
	}
	db, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()
	if err := inbox.OnSQL(db).Migrate(ctx, opts...); err != nil {
		return c.fail(err)
	}
	fmt.Fprintf(stdout, "%s is at schema version %d (%s)\n", c.table, ms[len(ms)-1].Version, ms[len(ms)-1].Name)
	return exitOK
}

func cleanupCommand(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) int {
	fs := c.flags("Deletes the rows whose last state change is older than --window, --batch rows per DELETE, until a\n" +
		"batch finds nothing. Prints a progress line at most every --progress on stderr, and a summary on stdout.\n" +
		"Rows in 'processing' are never deleted; those whose lease ran out before the cutoff are counted as abandoned.")
	window := days(inbox.DefaultRetention)
	fs.Var(&window, "window", "delete rows older than this (the retention; choose it from the longest redelivery of your sources)")
	batch := fs.Int("batch", inbox.DefaultCleanupBatch, fmt.Sprintf("rows per DELETE, 1 to %d", inbox.MaxCleanupBatch))
	pause := days(0)
	fs.Var(&pause, "pause", "wait this long after each batch, to let replicas and autovacuum keep up (default: five times as long as the batch took; 1ns runs flat out)")
	every := days(time.Second)
	fs.Var(&every, "progress", "print a progress line at most this often")
	verbose := fs.Bool("verbose", false, "also print the library's log lines on stderr")
	var partitions days
	fs.Var(&partitions, "partitions", "the table is partitioned by this period (migrate --partitions): create partitions ahead and drop expired ones whole; default none")
	if code := c.parse(args); code >= 0 {
		return code
	}
	opts := []inbox.MaintenanceOption{inbox.WithTable(c.table), inbox.WithLogger(c.logger(!*verbose))}
	if partitions != 0 {
		opts = append(opts, inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(time.Duration(partitions)))
		if _, err := inbox.OnSQL(nil).Migrations(opts...); err != nil {
			c.usageError("--partitions %s: %v", partitions, err)
			return exitUsage
		}
	}
	switch {
	case window <= 0:
		c.usageError("--window must be positive")
		return exitUsage
	case *batch < 1 || *batch > inbox.MaxCleanupBatch:
		c.usageError("--batch %d: want 1 to %d", *batch, inbox.MaxCleanupBatch)
		return exitUsage
	case pause < 0:
		c.usageError("--pause must not be negative")
		return exitUsage
	}
	db, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()

	start, last := time.Now(), time.Time{}
	res, err := inbox.OnSQL(db).Cleanup(ctx, inbox.CleanupParams{
		Retention: time.Duration(window),
		BatchSize: *batch,
		Pause:     time.Duration(pause),
		Progress: func(p inbox.CleanupProgress) {
			if time.Since(last) < time.Duration(every) {
				return
			}
			last = time.Now()
			elapsed := time.Since(start)
			fmt.Fprintf(stderr, "cleanup: %s deleted in %s, %s rows/s (now at consumer %s)\n",
				count(p.Total, "row", "rows"), count(int64(p.Batch), "batch", "batches"),
				group(int64(float64(p.Total)/max(elapsed.Seconds(), 0.001))), p.Consumer)
		},
	}, opts...)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted after %s (what was deleted stays deleted): %w", count(res.Deleted, "row", "rows"), err)
		}
		return c.fail(err)
	}
	if res.Skipped {
		fmt.Fprintf(stdout, "skipped: another cleanup of %s is running\n", c.table)
		return exitOK
	}
	fmt.Fprintf(stdout, "deleted %s of %s older than %s (before %s) in %s, %s\n",
		count(res.Deleted, "row", "rows"), c.table, window, res.Cutoff.UTC().Format(time.RFC3339),
		count(int64(res.Batches), "batch", "batches"), res.Took.Round(time.Millisecond))
	if partitions != 0 {
		fmt.Fprintf(stdout, "created %s, dropped %s\n", count(int64(res.PartitionsCreated), "partition", "partitions"),
			count(int64(res.PartitionsDropped), "partition", "partitions"))
	}
	if res.Abandoned == 1 {
		fmt.Fprintln(stdout, "left 1 abandoned lease: a 'processing' row whose lease ran out before the cutoff; see 'watermill-inbox stats'")
	} else if res.Abandoned > 1 {
		fmt.Fprintf(stdout, "left %s abandoned leases: 'processing' rows whose lease ran out before the cutoff; see 'watermill-inbox stats'\n",
			group(res.Abandoned))
	}
	return exitOK
}

func statsCommand(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) int {
	fs := c.flags("Shows the rows of each consumer by state, how far back each remembers, the table's size, and how\n" +
		"many consumer ids are left for new consumer names.")
	asJSON := fs.Bool("json", false, "print the stats as JSON (durations in seconds)")
	var warn days
	fs.Var(&warn, "warn-below", "exit 4 if a consumer remembers less than this (the longest redelivery of your sources); "+
		"a consumer younger than that trips it too")
	if code := c.parse(args); code >= 0 {
		return code
	}
	db, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()
	st, err := inbox.OnSQL(db).ReadStats(ctx, inbox.WithTable(c.table))
	if err != nil {
		return c.fail(err)
	}

	if *asJSON {
		if err := writeStatsJSON(stdout, st); err != nil {
			return c.fail(err)
		}
	} else {
		writeStats(stdout, st)
	}
	code := exitOK
	for _, cs := range st.Consumers {
		if warn > 0 && !cs.RemembersSince.IsZero() && cs.Age < time.Duration(warn) {
			fmt.Fprintf(stderr, "warning: %s remembers %s, less than %s: a copy redelivered from further back would be applied again\n",
				cs.Consumer, days(cs.Age), warn)
			code = exitShort
		}
	}
	return code
}

func writeStats(w io.Writer, st inbox.Stats) {
	var rows, expired int64
	for _, cs := range st.Consumers {
		rows += cs.Rows
		expired += cs.Expired
	}
	fmt.Fprintf(w, "table %s: %s rows; heap %s, indexes %s, total %s", st.Table, group(rows),
		bytesOf(st.TableBytes), bytesOf(st.IndexBytes), bytesOf(st.TotalBytes))
	if rows > 0 {
		fmt.Fprintf(w, " (%.0f bytes per row)", float64(st.TotalBytes)/float64(rows))
	}
	fmt.Fprintln(w)
	if st.ConsumerIDs > 0 {
		fmt.Fprintf(w, "consumer ids: %s of %s left\n", group(st.ConsumerIDsLeft), group(st.ConsumerIDs))
		if st.ConsumerIDsLeft == 0 {
			fmt.Fprint(w, "No new consumer name can be registered: its messages are held back. Give consumers fixed names,\n"+
				"and new ones a table of their own.\n")
		}
	}
	if len(st.Consumers) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "consumer\trows\tdone\tfailed\treleased\tprocessing\texpired leases\tremembers\toldest row (UTC)\t")
	for _, cs := range st.Consumers {
		remembers, oldest := "-", "-"
		if !cs.RemembersSince.IsZero() {
			remembers = days(cs.Age).String()
		}
		if !cs.Oldest.IsZero() {
			oldest = cs.Oldest.UTC().Format("2006-01-02 15:04:05")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", cs.Consumer, group(cs.Rows), group(cs.Done), group(cs.Failed),
			group(cs.Released), group(cs.Processing), group(cs.Expired), remembers, oldest)
	}
	tw.Flush()
	switch {
	case expired == 1:
		fmt.Fprint(w, "\n1 'processing' row has an expired lease: its holder died, and the next copy takes it over.\n"+
			"If it is old, that copy never came: settle the side effect with its provider, then 'watermill-inbox forget' it.\n")
	case expired > 1:
		fmt.Fprintf(w, "\n%s 'processing' rows have an expired lease: their holder died, and the next copy takes them over.\n"+
			"Old ones were never redelivered: settle the side effect with its provider, then 'watermill-inbox forget' them.\n", group(expired))
	}
}

func writeStatsJSON(w io.Writer, st inbox.Stats) error {
	type consumer struct {
		Consumer         string  `json:"consumer"`
		Rows             int64   `json:"rows"`
		Done             int64   `json:"done"`
		Failed           int64   `json:"failed"`
		Released         int64   `json:"released"`
		Processing       int64   `json:"processing"`
		ExpiredLeases    int64   `json:"expired_leases"`
		Oldest           *string `json:"oldest"`
		RemembersSince   *string `json:"remembers_since"`
		RemembersSeconds float64 `json:"remembers_seconds"`
	}
	out := struct {
		Table      string `json:"table"`
		Now        string `json:"now"`
		TableBytes int64  `json:"table_bytes"`
		IndexBytes int64  `json:"index_bytes"`
		TotalBytes int64  `json:"total_bytes"`
		// null when the table has no limit on consumer names
		ConsumerIDs     *int64     `json:"consumer_ids"`
		ConsumerIDsLeft *int64     `json:"consumer_ids_left"`
		Consumers       []consumer `json:"consumers"`
	}{Table: st.Table, Now: st.Now.UTC().Format(time.RFC3339Nano), TableBytes: st.TableBytes, IndexBytes: st.IndexBytes,
		TotalBytes: st.TotalBytes, Consumers: []consumer{}}
	if st.ConsumerIDs > 0 {
		out.ConsumerIDs, out.ConsumerIDsLeft = &st.ConsumerIDs, &st.ConsumerIDsLeft
	}
	for _, cs := range st.Consumers {
		c := consumer{Consumer: cs.Consumer, Rows: cs.Rows, Done: cs.Done, Failed: cs.Failed, Released: cs.Released,
			Processing: cs.Processing, ExpiredLeases: cs.Expired, RemembersSeconds: cs.Age.Seconds()}
		c.Oldest, c.RemembersSince = timestamp(cs.Oldest), timestamp(cs.RemembersSince)
		out.Consumers = append(out.Consumers, c)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// timestamp is t for JSON, or nil when t is zero.
func timestamp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func forgetCommand(ctx context.Context, c *common, args []string, stdout, stderr io.Writer) int {
	fs := c.flags("Deletes the row of one message, so that its next copy is applied again: after its effect was undone\n" +
		"by hand, or to retry a 'failed' lease-mode message after a fix. The deletion is logged on stderr.")
	consumer := fs.String("consumer", "", "the consumer (by default the Watermill handler's name) (required)")
	id := fs.String("id", "", "the event ID (required)")
	force := fs.Bool("force", false, "delete the row even while a holder's lease on it is live (its call may then run twice)")
	if code := c.parse(args); code >= 0 {
		return code
	}
	if *consumer == "" || *id == "" {
		c.usageError("--consumer and --id are required")
		return exitUsage
	}
	db, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()
	row, err := inbox.OnSQL(db).Forget(ctx, inbox.ForgetParams{Consumer: *consumer, ID: *id, Force: *force},
		inbox.WithTable(c.table), inbox.WithLogger(c.logger(false)))
	switch {
	case errors.Is(err, inbox.ErrNotFound):
		fmt.Fprintf(stderr, "watermill-inbox forget: %s has no row for consumer %q and ID %q: nothing to forget\n", c.table, *consumer, *id)
		return exitNotFound
	case errors.Is(err, inbox.ErrLeaseHeld):
		fmt.Fprintf(stderr, "watermill-inbox forget: the row of %s/%s is being processed under a live lease: "+
			"retry when it has ended, or add --force (its call may then run twice)\n", *consumer, *id)
		return exitLeaseHeld
	case err != nil:
		return c.fail(err)
	}
	fmt.Fprintf(stdout, "forgot %s/%s: it was %s since %s", *consumer, *id, row.State, row.ProcessedAt.UTC().Format(time.RFC3339))
	if row.Attempts > 0 {
		fmt.Fprintf(stdout, " after %d attempts", row.Attempts)
	}
	if row.LastError != "" {
		fmt.Fprintf(stdout, " (last error: %s)", row.LastError)
	}
	fmt.Fprintln(stdout)
	if row.HadProduced {
		fmt.Fprintln(stdout, "it held produced messages: the next run produces them anew")
	}
	return exitOK
}

// days is a duration flag that also takes days ("14d", "1d12h"), and prints whole days as such.
type days time.Duration

func (d *days) Set(s string) error {
	var total time.Duration
	if i := strings.IndexByte(s, 'd'); i > 0 {
		n, err := strconv.Atoi(s[:i])
		if err != nil || n < 0 {
			return fmt.Errorf("bad number of days in %q", s)
		}
		total, s = time.Duration(n)*24*time.Hour, s[i+1:]
	}
	if s != "" {
		rest, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		total += rest
	}
	*d = days(total)
	return nil
}

func (d days) String() string {
	t := time.Duration(d)
	if t >= 24*time.Hour {
		day := t / (24 * time.Hour)
		rest := (t - day*24*time.Hour).Round(time.Minute)
		if rest == 0 {
			return fmt.Sprintf("%dd", day)
		}
		return fmt.Sprintf("%dd%s", day, strings.TrimSuffix(rest.String(), "0s"))
	}
	return t.Round(time.Second).String()
}

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// count formats n with its noun, singular for exactly one.
func count(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return group(n) + " " + many
}

// bytesOf formats a size in binary units, as PostgreSQL's pg_size_pretty does.
func bytesOf(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	f, u := float64(n), 0
	units := []string{"kB", "MB", "GB", "TB"}
	for f /= unit; f >= unit && u < len(units)-1; f /= unit {
		u++
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
