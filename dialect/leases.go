package dialect

import (
	"context"
	"time"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Leases are lease mode's statements: the claim of a row's lease, which a handler then holds outside any
// transaction, and the holder's writes to it. Each runs in a short transaction of the inbox's own (InShortTx,
// under READ COMMITTED), which commits before the handler goes on: a lease is seen by every copy of its message
// at once, and is timed by the database clock, never a process's. A row is named by Table, Consumer, the
// ConsumerID that Schema.ConsumerID returned for Consumer, and the message's ID; its holder by Token, the fence no
// other claim of the row shares.
type Leases interface {
	// ClaimLease claims the lease of a row for Token, inserting the row when there is none, or reads why it
	// cannot: a live lease, or a finished row. Like Claims.Claim, it fails with StaleConsumer when ConsumerID no
	// longer names Consumer.
	ClaimLease(ctx context.Context, tx driver.Executor, p LeaseClaimParams) (LeaseClaim, error)
	// ExtendLease, ReleaseLease, CompleteLease and FailLease are the lease holder's writes, each a compare-and-set
	// on the token and the 'processing' state: they report false, and change nothing, when the lease is no
	// longer Token's. Arg is the new lease length in ms for ExtendLease, the error text (string) for ReleaseLease
	// and FailLease, and the produced messages ([]byte, nil for none) for CompleteLease.
	ExtendLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)
	ReleaseLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)
	CompleteLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)
	FailLease(ctx context.Context, tx driver.Executor, p LeaseWriteParams) (held bool, err error)
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
	// Arg is the write's one value: see Leases.ExtendLease.
	Arg any
}
