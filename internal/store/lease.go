package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/fingerprint"
)

// ClaimLease claims the lease of (consumer, id) for token, or reports why it cannot: the claim and, when it took
// nothing, the read of the row run in one short transaction of their own (see InShortTx). A claim that found its
// consumer id stale wrote nothing, and goes once more with the id the name has now.
func (s *Store) ClaimLease(ctx context.Context, pool driver.Pool, consumer, id, token string, lease time.Duration, f []byte) (dialect.LeaseClaim, error) {
	c, err := s.claimLeaseOnce(ctx, pool, consumer, id, token, lease, f)
	if errors.Is(err, ErrStaleConsumer) {
		c, err = s.claimLeaseOnce(ctx, pool, consumer, id, token, lease, f)
	}
	return c, err
}

func (s *Store) claimLeaseOnce(ctx context.Context, pool driver.Pool, consumer, id, token string, lease time.Duration, f []byte) (dialect.LeaseClaim, error) {
	var c dialect.LeaseClaim
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return c, err
	}
	err = InShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		c, err = s.leases.ClaimLease(ctx, tx, dialect.LeaseClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Token: token, Lease: lease})
		if err != nil {
			return s.wrap(opClaimLease, consumer, id, err)
		}
		if !c.Claimed || f == nil {
			return nil
		}
		if c.Attempt == 1 && !c.Takeover { // a new row: nothing stored to compare with
			return s.SaveFingerprint(ctx, tx, consumer, id, f)
		}
		// A row that was there before (a lease released or run out) keeps the fingerprint of the message that
		// first claimed it: a copy with another one is a conflict, and the claim is rolled back, so that the row
		// stays as it was for the copies of its own message.
		stored, err := s.ReadFingerprint(ctx, tx, consumer, id)
		if err != nil {
			return err
		}
		if fingerprint.Conflicts(stored, f) {
			return &LeaseFingerprintConflict{Stored: stored}
		}
		if stored == nil { // a row from before WithFingerprint: the fingerprint commits with the claim
			return s.SaveFingerprint(ctx, tx, consumer, id, f)
		}
		return nil
	})
	return c, err
}

// LeaseFingerprintConflict is a lease claim rolled back because the row it would take over carries the fingerprint
// of another message (WithFingerprint).
type LeaseFingerprintConflict struct{ Stored []byte }

func (e *LeaseFingerprintConflict) Error() string {
	return "inbox: the lease's row carries the fingerprint of another message"
}

// LeaseOp names one of the lease holder's compare-and-set writes.
type LeaseOp int

const (
	ExtendLease   LeaseOp = iota // Arg: the new lease length in ms
	CompleteLease                // Arg: the produced messages ([]byte, nil for none)
	FailLease                    // Arg: the stored error text
	ReleaseLease                 // Arg: the stored error text
)

// String names the write, for errors and logs.
func (l LeaseOp) String() string { return l.op().String() }

// op is the write as the Store's errors name it.
func (l LeaseOp) op() op { return opExtendLease + op(l) }

// leaseStatement returns the dialect's compare-and-set for op.
func (s *Store) leaseStatement(op LeaseOp) func(context.Context, driver.Executor, dialect.LeaseWriteParams) (bool, error) {
	return [...]func(context.Context, driver.Executor, dialect.LeaseWriteParams) (bool, error){
		s.leases.ExtendLease, s.leases.CompleteLease, s.leases.FailLease, s.leases.ReleaseLease}[op]
}

// Fenced runs one of the lease's compare-and-set writes in a short transaction of its own, and returns an error
// wrapping ErrLeaseLost only when the compare-and-set matched no row: the lease is no longer the holder's. Any
// other failure is returned as what it is; the write did not happen, and the caller must not take it for a lost
// lease. Only CompleteLease stores a value that can be refused for itself: the produced messages.
func (s *Store) Fenced(ctx context.Context, pool driver.Pool, lop LeaseOp, consumer, id, token string, arg any) error {
	write, op, stores := s.leaseStatement(lop), lop.op(), lop == CompleteLease
	var held bool
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return err
	}
	err = InShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		held, err = write(ctx, tx, dialect.LeaseWriteParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Token: token, Arg: arg})
		return err
	})
	switch kind := s.d.Classify(err); {
	case kind == dialect.NoTable:
		return fmt.Errorf("inbox: %s %s/%s in table %s: %w: %w", op, consumer, id, s.table, ErrSchemaMissing, err)
	case kind == dialect.ClientEncoding:
		// The handler, or whoever shares the pool, switched the session's encoding: nothing was written.
		return fmt.Errorf("inbox: %s %s/%s: %w: %w", op, consumer, id, ErrClientEncoding, err)
	case err != nil && stores:
		return s.wrapProduced(op, consumer, id, err) // the produced messages are the one value it adds
	case err != nil:
		// Not wrap: the row exists, so a value the database refuses here is no fault of the event ID.
		return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, err)
	case !held:
		return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, ErrLeaseLost)
	}
	return nil
}
