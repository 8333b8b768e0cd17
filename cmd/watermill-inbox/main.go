// Command watermill-inbox runs the operations of a watermill-inbox table, on PostgreSQL or on MariaDB and MySQL,
// from a terminal or a cron job: create or upgrade it, delete expired rows, show what it holds, and forget one
// message so it can be replayed. The database is the one --dsn names, in either's form.
// Run `watermill-inbox help` for the commands, their flags and the exit codes.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
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

The inbox remembers, in one table of PostgreSQL, MariaDB or MySQL, the event IDs each consumer has applied, so that a redelivered
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

  --dsn DSN       The database, in one of these forms:
                    PostgreSQL: postgres://user:pass@host:5432/db?sslmode=disable (or postgresql://), or
                                host=... dbname=... (libpq's key=value form)
                    MariaDB, MySQL: mysql://user:pass@host:3306/db, or go-sql-driver's user:pass@tcp(host:3306)/db
                  Default: $DATABASE_URL, in any of these forms; when that is empty, PostgreSQL through the PG*
                  environment variables (PGHOST, PGUSER, PGDATABASE, ...) and localhost:5432.
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
