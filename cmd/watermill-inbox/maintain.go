package main

import (
	"context"
	"fmt"
	"io"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
)

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
	db, database, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()
	ms, err := database.Migrations(opts...)
	if err != nil {
		return c.fail(err)
	}
	if err := database.Migrate(ctx, opts...); err != nil {
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
	fs.Var(&pause, "pause", "wait this long after each batch, to let replicas and autovacuum keep up (default: twenty times as long as the batch took; 1ns runs flat out)")
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
	db, database, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()

	start, last := time.Now(), time.Time{}
	res, err := database.Cleanup(ctx, inbox.CleanupParams{
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
