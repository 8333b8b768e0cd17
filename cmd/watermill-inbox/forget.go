package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
)

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
	db, database, err := c.open(ctx)
	if err != nil {
		return c.fail(err)
	}
	defer db.Close()
	row, err := database.Forget(ctx, inbox.ForgetParams{Consumer: *consumer, ID: *id, Force: *force},
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
