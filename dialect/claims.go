package dialect

import (
	"context"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Claims are the statements of a message's path outside lease mode: the claim of a message's row (one message, a
// batch, a row lease mode left free), the reads of a row, the produced messages stored with it and the savepoint
// around a claim. Each runs in the transaction it is given (tx, q), which the inbox began, or a subscriber began
// and the inbox joined, and never commits it nor rolls it back: what it writes lands with that transaction's
// commit and goes with its rollback. A row is named by Table, Consumer, the ConsumerID that Schema.ConsumerID
// returned for Consumer, and the message's ID.
//
// Finish, and Claim in state "applying", serve only a subscriber's transaction: a dialect that does not join one
// (JoinsSubscriberTx) is never asked for them, and may return an error.
type Claims interface {
	// Claim inserts the row of (Consumer, ID) in State, and reports whether the transaction now owns it; false
	// means the row was there, and the transaction did not take it. The claims (Claim, ClaimBatch,
	// Leases.ClaimLease, AtCommitClaimer's) fail with StaleConsumer, before they look for a row, when ConsumerID
	// no longer names Consumer (unless ClaimParams.Fresh): a stale id must never find another consumer's row and
	// take it for a duplicate. A dialect whose rows carry names has no id to go stale.
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
	// Savepoint sets, rolls back to or releases the savepoint around a claim in a subscriber's transaction, or
	// around one message of a batch in the batch's transaction.
	Savepoint(ctx context.Context, tx driver.Executor, step SavepointStep) error
}

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

// ClaimBatchParams are the inputs of ClaimBatch.
type ClaimBatchParams struct {
	Table, Consumer string
	ConsumerID      int      // what ConsumerID returned for Consumer
	IDs             []string // sorted, distinct
	// State is "done": a batch is always in a transaction the inbox commits.
	State string
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
