package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/effectively-once/watermill-inbox"
)

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
	fs.StringVar(&c.dsn, "dsn", "", "the database: a postgres:// or mysql:// URL, libpq's key=value form, or go-sql-driver's user@tcp(host:port)/db (default $DATABASE_URL, else PostgreSQL through the PG* variables)")
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

// open connects to the database the DSN names and checks the connection, so that a wrong DSN is reported as such
// before any work, and returns the inbox's view of it through the dialect of its kind.
func (c *common) open(ctx context.Context) (*sql.DB, *inbox.Database, error) {
	dsn := c.dsn
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	target, err := parseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --dsn: %w", inbox.ErrInvalidOption, err)
	}
	db, err := sql.Open(target.driver, target.dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --dsn: %w", inbox.ErrInvalidOption, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("connect to %s: %w", target.name, err)
	}
	return db, target.database(db), nil
}

// logger writes the library's log lines (what cleanup did, what forget removed) to stderr; when quiet, nothing.
func (c *common) logger(quiet bool) watermill.LoggerAdapter {
	if quiet {
		return watermill.NopLogger{}
	}
	return watermill.NewStdLoggerWithOut(c.stderr, false, false)
}
