// Package dialect is the seam between the inbox and a database's SQL: every statement the inbox runs is one named
// operation of a Dialect's concerns (Claims, Leases, Locks, Maintenance, Schema), with its inputs in a params
// struct, so that all of one database's SQL lives in one implementation. The inbox ships PostgreSQL's; the
// mysqlinbox module ships MySQL's and MariaDB's. A dialect runs its statements through the driver package's
// Executor and Pool, so it works over any client library that has an adapter there.
//
// Every operation gets the inbox table's name in its params. The name was validated before (lower-case letters,
// digits and underscores), so a dialect may put it into its SQL as it is; the tables beside it are named after it
// with a suffix ("_produced", "_locks", "_migrations").
package dialect

import (
	"context"
	"time"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Dialect runs the inbox's statements on one kind of database. It names the database and reads its errors
// itself; its statements are grouped by concern, each behind an accessor: the message path's claims (Claims),
// lease mode's (Leases), the maintenance lock (Locks), the work off a message's path (Maintenance) and the
// tables' versions and shape (Schema). Operations that take a driver.Executor run inside a transaction the inbox
// began (or joined) and ends; the ones that take a driver.Pool manage their own.
//
// The inbox asks for a concern once, when it builds its store or starts an operation off a message's path, and
// keeps what it got. A dialect most often implements every concern on one type, whose accessors return the
// dialect itself; the optional interfaces (SpanCleaner, Partitioner, AtCommitClaimer, Fingerprinter, RowsReader,
// Speaker, Locator, TxEnder) are found on the Dialect, not on its concerns.
type Dialect interface {
	// Name names the database, for messages: "postgres", "mysql".
	Name() string

	// Classify tells what a driver error means to the inbox; the inbox never reads error codes itself. It reads
	// the errors of every concern's operations.
	Classify(err error) ErrorKind

	// JoinsSubscriberTx reports whether the inbox may claim inside a transaction a subscriber began and commits
	// (Claims' Finish, and Savepoint around such a claim, are then used). A dialect that cannot guard such a
	// claim against an early commit returns false, and the inbox refuses to be built with a way to join one.
	JoinsSubscriberTx() bool

	// Claims returns the statements of a message's path.
	Claims() Claims
	// Leases returns lease mode's statements.
	Leases() Leases
	// Locks returns the statements of the named locks the maintenance takes.
	Locks() Locks
	// Maintenance returns the statements that run off a message's path: cleanup, retention, stats, forget.
	Maintenance() Maintenance
	// Schema returns the statements of the inbox's tables: their migrations, their shape, their consumers.
	Schema() Schema
}

// SpanCleaner is implemented by a dialect whose cleanup walks the table's pages once for all consumers instead of
// consumer by consumer through an index: PostgreSQL's, whose cleanup index is a BRIN index that summarizes pages
// rather than listing rows. The cleanup runs CleanupSpan once, CleanupPages for each window of the span in page
// order, CleanupRest until it deletes nothing, and CleanupSummarize for the span, each in a short transaction of
// its own. A row "to delete" is one older than the cutoff and not 'processing'.
type SpanCleaner interface {
	// CleanupSpan records Cutoff as the time before which every consumer's rows may be gone (before any is
	// deleted, so that what Remembers reports is never too long), and returns the span of pages that hold rows
	// to delete.
	CleanupSpan(ctx context.Context, tx driver.Executor, p CleanupPagesParams) (Span, error)
	// CleanupPages deletes at most Limit of the rows to delete on pages From to To-1, with their produced
	// messages, and counts them per consumer.
	CleanupPages(ctx context.Context, tx driver.Executor, p CleanupPagesParams) (map[string]int64, error)
	// CleanupRest deletes at most Limit rows to delete wherever they are, for rows a walk in page order did not
	// meet, and counts them per consumer.
	CleanupRest(ctx context.Context, tx driver.Executor, p CleanupPagesParams) (map[string]int64, error)
	// CleanupSummarize brings the cleanup index's summaries of pages From to To-1 up to date after a walk
	// deleted rows there. It may give up, returning nil, when it would wait for a lock; VACUUM then does it.
	CleanupSummarize(ctx context.Context, tx driver.Executor, p CleanupPagesParams) error
}

// Partitioner is implemented by a dialect that can keep the inbox table as partitions by ranges of message ID
// (UUIDv7 IDs, whose first 48 bits are a time), so that retention drops whole partitions instead of deleting
// rows. Bounds are IDs in the column's text form; the ranges include From and exclude To. CreatePartition and
// DropPartition wait only briefly for their locks: one that could not take them returns an error that Classify
// calls LockConflict, and the caller tries again in its next round.
type Partitioner interface {
	// PartitionedMigrations returns ms with the inbox table created partitioned by message_id, with a default
	// partition for IDs outside every range. It changes only the creation of a new table.
	PartitionedMigrations(table string, ms []Migration) ([]Migration, error)
	// Partitions lists the table's partitions and reads the database's clock.
	Partitions(ctx context.Context, tx driver.Executor, table string) (PartitionList, error)
	// CreatePartition creates the partition Name for IDs From to To, moving the rows of that range out of the
	// default partition in the same transaction.
	CreatePartition(ctx context.Context, tx driver.Executor, p PartitionParams) error
	// DetachPartition detaches the partition Name from the table, with the produced messages of its range: the
	// table's lock is held only for that. DropPartition drops the detached table afterwards, in a transaction of
	// its own that locks no more than it.
	DetachPartition(ctx context.Context, tx driver.Executor, p PartitionParams) error
	DropPartition(ctx context.Context, tx driver.Executor, p PartitionParams) error
}

// PartitionList is what Partitions found.
type PartitionList struct {
	// Partitioned is false for a table that is not partitioned; the other fields are then empty.
	Partitioned bool
	// Default names the default partition, "" for none.
	Default string
	// Ranges are the partitions of one range of IDs each, in order of name.
	Ranges []PartitionParams
	// Detached names the inbox's partitions that were detached and not dropped (a pass stopped between the two).
	Detached []string
	// Now is the database's clock.
	Now time.Time
}

// PartitionParams name one partition of Table and its range of IDs.
type PartitionParams struct {
	Table, Name, From, To string
	// Default is the default partition's name, whose rows in the range CreatePartition moves; "" for none.
	Default string
}

// Span is the pages of a table that hold rows a cleanup deletes: First to Last, both included; none when Last <
// First.
type Span struct {
	First, Last int64
	// RowsPerPage is the table's average, for sizing the walk's windows; 0 when unknown.
	RowsPerPage float64
}

// CleanupPagesParams are the inputs of SpanCleaner's operations.
type CleanupPagesParams struct {
	Table string
	// Partition, when set, is the one partition of Table the walk cleans (the default partition of a table
	// whose other partitions are dropped whole); Table's side tables still go by Table's name.
	Partition string
	Cutoff    time.Time
	From, To  int64 // pages: From included, To not
	Limit     int   // the most rows one operation deletes
}

// ErrorKind is what a driver error means to the inbox.
type ErrorKind int

const (
	// Other is any error the inbox has no special handling for.
	Other ErrorKind = iota
	// NoTable is a statement that named a table that does not exist.
	NoTable
	// IDRefused is a value the database cannot store in a message_id column or its key: not a UUID for a uuid
	// column, too long for the key, characters the column cannot hold.
	IDRefused
	// ValueRefused is any other value the database refuses to store (bad data, a limit, a check): it would be
	// refused again on every try.
	ValueRefused
	// SerializationFailure is a transaction that read a snapshot older than a row it must write, and was rolled
	// back: running it again is safe.
	SerializationFailure
	// LockConflict is a transaction rolled back for a deadlock or a lock wait that ran out: running it again is
	// safe.
	LockConflict
	// StatementMissing is a prepared statement the server does not know, or already knows under the driver's
	// name: a driver that caches prepared statements, behind a transaction-pooling proxy.
	StatementMissing
	// SequenceExhausted is a sequence, or an identity column's counter, that handed out its last value: nothing
	// that needs a new one (ConsumerID registering a name) can succeed until an operator acts.
	SequenceExhausted
	// StaleConsumer is a claim whose ConsumerID no longer names its Consumer in the consumers table: the table was
	// made anew (a migration rolled back and applied again) and numbered its consumers otherwise. Under a snapshot
	// older than the consumer's registration (a subscriber's REPEATABLE READ transaction) a valid id looks the
	// same. The claim wrote nothing; the id must be asked for again (Schema.ConsumerID) before the message is
	// claimed again. A dialect whose rows carry names never returns it.
	StaleConsumer
	// ClientEncoding is a statement refused because the session would not carry the inbox's text as it was sent:
	// a PostgreSQL session whose client_encoding was switched from UTF8. Nothing was written; the same statement on
	// a session of the right encoding succeeds.
	ClientEncoding
	// Untranslatable is text the database could not convert between the session's encoding and its own: on a
	// session whose encoding was switched, an event ID or a consumer name the inbox checked as UTF-8 (the session's
	// fault, as ClientEncoding is); in produced messages, a character the database cannot store.
	Untranslatable
)

// Retryable reports whether a transaction that failed with k may run again.
func (k ErrorKind) Retryable() bool { return k == SerializationFailure || k == LockConflict }

// AtCommitClaimer is implemented by a dialect that can write a claim as a plain INSERT, one that fails on a row
// already there instead of doing nothing: sent with COMMIT (WithClaimAtCommit), its failure keeps the transaction
// from committing. ClaimAtCommit returns the statement and its arguments for a claim in state "done".
type AtCommitClaimer interface {
	ClaimAtCommit(p ClaimParams) (query string, args []any)
}

// Fingerprinter is implemented by a dialect that can keep, with a message's row, a fingerprint of what the message
// said (inbox.WithFingerprint), so that a copy can be told from another message that reuses its event ID. The
// fingerprint has a column of its own, which only the tables of inboxes that use it have: the default layout, and
// its bytes per row, stay as they are.
type Fingerprinter interface {
	// AddFingerprint adds the fingerprint column, NULL in every existing row, to Table when it lacks it, without
	// rewriting the table. Migrate runs it in its transaction, under its lock.
	AddFingerprint(ctx context.Context, tx driver.Executor, table string) error
	// FingerprintColumn reports whether Table has the fingerprint column, and, when it has one of another type than
	// AddFingerprint makes, what is wrong with it ("" when nothing is).
	FingerprintColumn(ctx context.Context, q driver.Executor, table string) (present bool, problem string, err error)
	// SaveFingerprint stores Fingerprint with the row of (Consumer, ID) that the transaction claimed.
	SaveFingerprint(ctx context.Context, tx driver.Executor, p FingerprintParams) error
	// ReadFingerprint returns the fingerprint stored with a row, nil for a row written without one, and
	// driver.ErrNoRows when there is no row.
	ReadFingerprint(ctx context.Context, q driver.Executor, p RowParams) ([]byte, error)
}

// FingerprintParams are the inputs of SaveFingerprint.
type FingerprintParams struct {
	Table, Consumer, ID string
	ConsumerID          int // what ConsumerID returned for Consumer
	Fingerprint         []byte
}

// RowsReader is a Dialect that reads many rows in one statement. Batch mode reads with it, in the batch's
// transaction, the rows its claim found there already, so that a copy of a finished message ends with its batch's
// claim instead of in a transaction of its own; with a dialect that is not one, each such message goes on alone.
type RowsReader interface {
	// ReadRows returns the state and the produced messages (nil for none) of the rows of Consumer and each of IDs,
	// by ID as ClaimBatch spells IDs; an ID without a row is left out.
	ReadRows(ctx context.Context, q driver.Executor, p RowsParams) (map[string]StoredRow, error)
}

// RowsParams name the rows of one consumer and several IDs.
type RowsParams struct {
	Table, Consumer string
	ConsumerID      int      // what ConsumerID returned for Consumer
	IDs             []string // distinct
}

// StoredRow is what ReadRows returns of one row: what ReadRow returns.
type StoredRow struct {
	State    string
	Produced []byte
}
