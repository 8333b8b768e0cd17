// Package dialect is the seam between the inbox and a database's SQL: every statement the inbox runs is one named
// operation of Dialect, with its inputs in a params struct, so that all of one database's SQL lives in one
// implementation. The inbox ships PostgreSQL's; the mysqlinbox module ships MySQL's and MariaDB's. A dialect runs
// its statements through the driver package's Executor and Pool, so it works over any client library that has an
// adapter there.
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

// Dialect runs the inbox's statements on one kind of database. Operations that take a driver.Executor run inside
// a transaction the inbox began (or joined) and ends; the ones that take a driver.Pool manage their own.
type Dialect interface {
	// Name names the database, for messages: "postgres", "mysql".
	Name() string

	// Classify tells what a driver error means to the inbox; the inbox never reads error codes itself.
	Classify(err error) ErrorKind

	// JoinsSubscriberTx reports whether the inbox may claim inside a transaction a subscriber began and commits
	// (Savepoint and Finish are then used). A dialect that cannot guard such a claim against an early commit
	// returns false, and the inbox refuses to be built with a way to join one.
	JoinsSubscriberTx() bool

	// ConsumerID returns the id the database stores for a consumer's name, registering the name if it is new, in
	// a transaction of its own that has committed when it returns: rows carry the id instead of the name. The
	// inbox asks once per consumer, and again after a claim failed with StaleConsumer, and passes the id in the
	// params below; a dialect that stores names returns 0.
	ConsumerID(ctx context.Context, pool driver.Pool, table, consumer string) (int, error)

	// Claim inserts the row of (Consumer, ID) in State, and reports whether the transaction now owns it; false
	// means the row was there, and the transaction did not take it. The claims (Claim, ClaimBatch, ClaimLease,
	// AtCommitClaimer's) fail with StaleConsumer, before they look for a row, when ConsumerID no longer names
	// Consumer (unless ClaimParams.Fresh): a stale id must never find another consumer's row and take it for a
	// duplicate.
	Claim(ctx context.Context, tx driver.Executor, p ClaimParams) (claimed bool, err error)
	// ClaimBatch inserts, in State, the rows of Consumer and each of IDs (sorted and distinct, so that two batches
	// that share IDs lock them in the same order and never deadlock), in one statement where the database allows,
	// and returns the IDs whose rows the transaction now owns, spelled as IDs (a uuid column's canonical text).
	ClaimBatch(ctx context.Context, tx driver.Executor, p ClaimBatchParams) (claimed []string, err error)
	// Unclaim deletes a row the transaction claimed and has not committed: in a batch, a message whose handler
	// failed gives its claim back while the others commit theirs.
	Unclaim(ctx context.Context, tx driver.Executor, p RowParams) error
	// ReadRow returns a row's state and the produced messages stored with it (nil for none); driver.ErrNoRows
	// when there is no row.
	ReadRow(ctx context.Context, q driver.Executor, p RowParams) (state string, produced []byte, err error)
	// SaveProduced stores the produced messages of a row the transaction claimed as 'done'.
	SaveProduced(ctx context.Context, tx driver.Executor, p ProducedParams) error
	// Finish turns a row the transaction claimed as 'applying' 'done' and stores the produced messages (nil for
	// none), so that a commit can never see one without the other. It reports false when the row is no longer
	// 'applying'.
	Finish(ctx context.Context, tx driver.Executor, p ProducedParams) (finished bool, err error)
	// TakeOver gives the transaction, in State, a row lease mode left free: 'released', or 'processing' with a
	// lease run out by the database clock. It reports false when the row is held or finished.
	TakeOver(ctx context.Context, tx driver.Executor, p ClaimParams) (took bool, err error)
	// Savepoint sets, rolls back to or releases the savepoint around a claim in a subscriber's transaction.
	Savepoint(ctx context.Context, tx driver.Executor, step SavepointStep) error

	// ClaimLease claims the lease of a row for Token, or reads why it cannot, in the inbox's short transaction.
	ClaimLease(ctx context.Context, tx driver.Executor, p LeaseClaimParams) (LeaseClaim, error)
	// ExtendLease, ReleaseLease, CompleteLease and FailLease are the lease holder's writes, each a compare-and-set
	// on the token and the 'processing' state: they report false, and change nothing, when the lease is no
	// longer Token's. Arg is the new lease length in ms for ExtendLease, the error text (string) for ReleaseLease
	// and FailLease, and the produced messages ([]byte, nil for none) for CompleteLease.
	ExtendLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)
	ReleaseLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)
	CompleteLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)
	FailLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)

	// TakeLock takes a named lock row of the table's locks table for Holder, for Hold, when it is free or its
	// holder's time ran out, and returns the database's clock minus Back (the cleanup's cutoff).
	TakeLock(ctx context.Context, tx driver.Executor, p LockParams) (taken bool, cutoff time.Time, err error)
	// ExtendLock extends Holder's lock by Hold; false when Holder no longer holds it.
	ExtendLock(ctx context.Context, tx driver.Executor, p LockParams) (held bool, err error)
	// ReleaseLock frees Holder's lock; another holder's is left alone.
	ReleaseLock(ctx context.Context, tx driver.Executor, p LockParams) error
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

	// Migrations returns the dialect's schema changes for the table, in order.
	Migrations(table string, idType string) ([]Migration, error)
	// Migrate applies the migrations not applied yet, records them in the table's versions table and calls
	// Check before it ends; an error from Check undoes what the database can undo. Many processes may call it at
	// once: they take turns.
	Migrate(ctx context.Context, pool driver.Pool, p MigrateParams) (from, to int, err error)
	// InspectSchema compares the table's schema with the shape the inbox needs.
	InspectSchema(ctx context.Context, q driver.Executor, table string) (SchemaReport, error)
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
	// same. The claim wrote nothing; the id must be asked for again (Dialect.ConsumerID) before the message is
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

// SavepointStep is a step of the savepoint around a claim in a subscriber's transaction.
type SavepointStep int

const (
	// SetSavepoint sets the savepoint before the claim.
	SetSavepoint SavepointStep = iota
	// RollbackSavepoint undoes everything since it.
	RollbackSavepoint
	// ReleaseSavepoint keeps everything since it and forgets it.
	ReleaseSavepoint
)

// ClaimParams are the inputs of Claim and TakeOver.
type ClaimParams struct {
	Table, Consumer, ID string
	// ConsumerID is what ConsumerID returned for Consumer. A claim that inserts a row checks, in its statement,
	// that the id still names Consumer, and fails with an error Classify calls StaleConsumer when it does not;
	// the statements that run after it in its transaction may then trust the id.
	ConsumerID int
	// State is "done" in a transaction the inbox commits, "applying" in one it does not.
	State string
	// Fresh tells Claim to trust ConsumerID without checking it: it was read just now, in a transaction of its
	// own, after a check in the claim's transaction failed because that transaction's snapshot (a subscriber's,
	// under REPEATABLE READ) is older than the consumer's registration and cannot see it.
	Fresh bool
}

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

// ClaimBatchParams are the inputs of ClaimBatch.
type ClaimBatchParams struct {
	Table, Consumer string
	ConsumerID      int      // what ConsumerID returned for Consumer
	IDs             []string // sorted, distinct
	// State is "done": a batch is always in a transaction the inbox commits.
	State string
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

// RowParams name one row.
type RowParams struct {
	Table, Consumer, ID string
	ConsumerID          int // what ConsumerID returned for Consumer
}

// ProducedParams are the inputs of SaveProduced and Finish.
type ProducedParams struct {
	Table, Consumer, ID string
	ConsumerID          int // what ConsumerID returned for Consumer
	// Produced is the JSON of the produced messages, nil for none.
	Produced []byte
}

// LeaseClaimParams are the inputs of ClaimLease.
type LeaseClaimParams struct {
	Table, Consumer, ID string
	ConsumerID          int // what ConsumerID returned for Consumer
	// Token is the new holder's fence, a UUID.
	Token string
	// Lease is how long the lease lasts, by the database clock.
	Lease time.Duration
}

// LeaseClaim is the outcome of ClaimLease.
type LeaseClaim struct {
	// Claimed is true when Token now holds the lease.
	Claimed bool
	// Attempt counts the claims so far, this one included; the row's count when Claimed is false.
	Attempt int
	// LastError is why the previous attempt ended, if one did.
	LastError string
	// Takeover is true when the previous holder's lease had run out.
	Takeover bool
	// State is the row's state when Claimed is false.
	State string
	// Remaining is what is left of a live lease when Claimed is false.
	Remaining time.Duration
	// Produced is the produced column of a 'done' row when Claimed is false.
	Produced []byte
}

// LeaseWriteParams are the inputs of the lease holder's writes.
type LeaseWriteParams struct {
	Table, Consumer, ID, Token string
	ConsumerID                 int // what ConsumerID returned for Consumer
	// Arg is the write's one value: see Dialect.ExtendLease.
	Arg any
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

// Migration is one versioned schema change of the inbox table.
type Migration struct {
	// Version orders migrations; Migrate applies each once, in ascending order.
	Version int
	// Name is the file name's description, such as "inbox".
	Name string
	// Up and Down are the SQL that applies and reverts the change, for the configured table.
	Up, Down string
}

// MigrateParams are the inputs of Migrate.
type MigrateParams struct {
	Table      string
	Migrations []Migration
	// Check runs once the migrations are applied, with from and to the versions before and after; an error
	// fails Migrate.
	Check func(ctx context.Context, q driver.Executor, from, to int) error
}

// SchemaReport is what InspectSchema found.
type SchemaReport struct {
	// IDType is the type of the inbox table's message_id as the inbox names it ("text", "uuid"), "" for another.
	IDType string
	// Missing is true when the inbox table does not exist.
	Missing bool
	// Absent lists objects that do not exist; Wrong lists objects that exist in another shape.
	Absent, Wrong []string
	// Outdated is true when the inbox table has the layout of an older version, which Migrate moves to the
	// current one.
	Outdated bool
}

// Incomplete reports whether only whole objects are missing, which Migrate can add without touching what exists.
func (r SchemaReport) Incomplete() bool { return len(r.Absent) > 0 && len(r.Wrong) == 0 }
