package dialect

import (
	"context"
	"time"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Locks are the named lock rows of the table's locks table ("_locks"), by which maintenance runs one pass of a
// kind at a time on a table (the cleanup's lock is named "cleanup"). A lock is Holder's, a name no other pass
// uses, for Hold from now by the database clock, and is free again once that time ran out, so that a holder that
// died never keeps it. Each operation runs in a short transaction the caller began and commits; a holder extends
// its lock first in the transaction of each piece of its work, so that one that lost the lock does no more.
type Locks interface {
	// TakeLock takes a named lock row of the table's locks table for Holder, for Hold, when it is free or its
	// holder's time ran out, and returns the database's clock minus Back (the cleanup's cutoff).
	TakeLock(ctx context.Context, tx driver.Executor, p LockParams) (taken bool, cutoff time.Time, err error)
	// ExtendLock extends Holder's lock by Hold; false when Holder no longer holds it.
	ExtendLock(ctx context.Context, tx driver.Executor, p LockParams) (held bool, err error)
	// ReleaseLock frees Holder's lock; another holder's is left alone.
	ReleaseLock(ctx context.Context, tx driver.Executor, p LockParams) error
}

// Maintenance are the statements that run off a message's path, from a cron job, a background cleaner, a metrics
// scrape or an operator's terminal: the cleanup's batches, the count of abandoned leases, how far back each
// consumer remembers, the table's stats and the deletion of one row. Each runs in a short transaction the caller
// began and commits, never in a message's; consumers are named by their names, not by the ids the rows may carry,
// and the times they report are the database clock's.
type Maintenance interface {
	// Consumers lists the table's consumers, in order.
	Consumers(ctx context.Context, tx driver.Executor, table string) ([]string, error)
	// CleanupBatch deletes at most Limit of one consumer's rows, not 'processing', with From <= processed_at <
	// Cutoff, oldest first.
	CleanupBatch(ctx context.Context, tx driver.Executor, p CleanupBatchParams) (CleanupBatch, error)
	// CountAbandoned counts 'processing' rows whose lease ran out before cutoff.
	CountAbandoned(ctx context.Context, tx driver.Executor, table string, cutoff time.Time) (int64, error)
	// Remembers returns, for each consumer, the time since which it remembers every message it applied (its
	// oldest row that is not 'processing', or what the dialect records of it), with the database's clock.
	Remembers(ctx context.Context, tx driver.Executor, table string) ([]Memory, error)
	// Stats counts each consumer's rows by state and reads the table's size; Exists is false without the table.
	Stats(ctx context.Context, tx driver.Executor, table string) (Stats, error)
	// Forget deletes one row, unless it holds a live lease and Force is false.
	Forget(ctx context.Context, tx driver.Executor, p ForgetParams) (Forgotten, error)
}

// LockParams are the inputs of the lock operations.
type LockParams struct {
	Table, Name, Holder string
	// Hold is how long the lock is held from now, by the database clock.
	Hold time.Duration
	// Back is subtracted from the database's clock to make TakeLock's cutoff.
	Back time.Duration
}

// CleanupBatchParams are the inputs of CleanupBatch.
type CleanupBatchParams struct {
	Table, Consumer string
	From, Cutoff    time.Time
	Limit           int
}

// CleanupBatch is the outcome of CleanupBatch.
type CleanupBatch struct {
	// Picked counts the rows the batch looked at; 0 when the consumer has no more to delete.
	Picked int64
	// Deleted counts the rows it deleted.
	Deleted int64
	// Next is where the next batch starts: the last picked row's processed_at, or From.
	Next time.Time
}

// Memory is how far back one consumer remembers.
type Memory struct {
	Consumer    string
	Oldest, Now time.Time
}

// Stats are the counts and sizes of an inbox table.
type Stats struct {
	Now                                time.Time
	Exists                             bool
	TableBytes, IndexBytes, TotalBytes int64
	Consumers                          []ConsumerStats
	// ConsumerIDs is how many consumer names the table can register in all, 0 when its rows carry the name and
	// it has no such limit; ConsumerIDsLeft is how many of those it can still register.
	ConsumerIDs, ConsumerIDsLeft int64
}

// ConsumerStats counts one consumer's rows by state; Oldest is zero when it has no row the cleanup may delete.
type ConsumerStats struct {
	Consumer                                          string
	Rows, Done, Failed, Released, Processing, Expired int64
	Oldest                                            time.Time
}

// ForgetParams are the inputs of Forget.
type ForgetParams struct {
	Table, Consumer, ID string
	Force               bool
}

// Forgotten is the outcome of Forget.
type Forgotten struct {
	// Deleted is true when the row was deleted; the fields below describe it.
	Deleted     bool
	State       string
	ProcessedAt time.Time
	Attempts    int
	LastError   string
	HadProduced bool
	// Held is true when the row was kept for its live lease, which has Remaining left.
	Held      bool
	Remaining time.Duration
}
