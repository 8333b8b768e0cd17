package fakedb

import (
	"context"
	"fmt"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// ClaimLease inserts a new row as 'processing' for Token, or takes a row lease mode left free ('released', or
// 'processing' with its lease run out by the database's clock), or reads why it cannot.
func (fake) ClaimLease(ctx context.Context, ex driver.Executor, p dialect.LeaseClaimParams) (dialect.LeaseClaim, error) {
	tx := txOf(ex)
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if err := tx.checkConsumer(p.Consumer, p.ConsumerID, false); err != nil {
		return dialect.LeaseClaim{}, err
	}
	k := key{p.Consumer, p.ID}
	if err := tx.lock(ctx, k); err != nil {
		return dialect.LeaseClaim{}, err
	}
	now := tx.db.now()
	held := row{state: "processing", token: p.Token, lockedUntil: now.Add(p.Lease), attempts: 1}
	r, there := tx.read(k)
	switch {
	case !there:
		tx.write(k, &held)
		return dialect.LeaseClaim{Claimed: true, Attempt: 1}, nil
	case r.state == "released" || (r.state == "processing" && !r.lockedUntil.After(now)):
		c := dialect.LeaseClaim{Claimed: true, Attempt: r.attempts + 1, LastError: r.lastError, Takeover: r.state == "processing"}
		if c.Takeover {
			c.LastError = fmt.Sprintf("lease of attempt %d expired", r.attempts)
		}
		held.attempts, held.lastError, held.fingerprint = c.Attempt, c.LastError, r.fingerprint
		tx.write(k, &held)
		return c, nil
	}
	c := dialect.LeaseClaim{Attempt: r.attempts, State: r.state, LastError: r.lastError, Produced: r.produced}
	if r.state == "processing" {
		c.Remaining = r.lockedUntil.Sub(now)
	}
	return c, nil
}

// leaseWrite is a compare-and-set of the holder of Token on a 'processing' row: f changes it, and the write
// reports false, changing nothing, when the lease is no longer Token's.
func leaseWrite(ctx context.Context, ex driver.Executor, p dialect.LeaseWriteParams, f func(r *row, now time.Time)) (bool, error) {
	tx := txOf(ex)
	now := tx.db.now()
	return tx.ownRow(ctx, key{p.Consumer, p.ID}, func(r *row) bool {
		if r.token != p.Token || r.state != "processing" {
			return false
		}
		f(r, now)
		return true
	})
}

func (fake) ExtendLease(ctx context.Context, ex driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return leaseWrite(ctx, ex, p, func(r *row, now time.Time) {
		r.lockedUntil = now.Add(time.Duration(toInt64(p.Arg)) * time.Millisecond)
	})
}

func (fake) ReleaseLease(ctx context.Context, ex driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return leaseWrite(ctx, ex, p, func(r *row, _ time.Time) {
		r.state, r.lockedUntil, r.lastError = "released", time.Time{}, fmt.Sprint(p.Arg)
	})
}

func (fake) CompleteLease(ctx context.Context, ex driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return leaseWrite(ctx, ex, p, func(r *row, _ time.Time) {
		produced, _ := p.Arg.([]byte)
		r.state, r.lockedUntil, r.produced = "done", time.Time{}, produced
	})
}

func (fake) FailLease(ctx context.Context, ex driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return leaseWrite(ctx, ex, p, func(r *row, _ time.Time) {
		r.state, r.lockedUntil, r.lastError = "failed", time.Time{}, fmt.Sprint(p.Arg)
	})
}

func toInt64(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case int:
		return int64(n)
	}
	return 0
}

// CommitWith runs the claim at commit (Dialect's ClaimAtCommit) and commits, as one step: a row already there
// fails the claim with a unique violation, and nothing commits.
func (tx *Tx) CommitWith(ctx context.Context, query string, args ...any) (bool, error) {
	if query != claimAtCommit || len(args) != 3 {
		return false, ErrUnsupported
	}
	consumer, _ := args[0].(string)
	cid, _ := args[1].(int)
	id, _ := args[2].(string)
	tx.db.mu.Lock()
	if err := tx.checkConsumer(consumer, cid, false); err != nil {
		tx.db.mu.Unlock()
		return false, err
	}
	claimed, err := tx.insert(ctx, key{consumer, id}, "done")
	tx.db.mu.Unlock()
	if err != nil {
		return false, err
	}
	if !claimed {
		return false, &Error{Kind: dialect.Other, Msg: fmt.Sprintf("unique violation: %s/%s", consumer, id)}
	}
	return true, tx.Commit(ctx)
}

// CommitsWith reports that the fake's transactions send the claim at commit (driver.CommitWithPool).
func (db *DB) CommitsWith() bool { return true }

var (
	_ driver.CommitWither   = (*Tx)(nil)
	_ driver.CommitWithPool = (*DB)(nil)
)

// Joiner finds a transaction a test put into a message's context with Subscribe: a subscriber's, which the inbox
// joins and the test commits.
func Joiner() driver.Joiner { return joiner{} }

type joiner struct{}

type subscriberKey struct{}

// Subscribe returns ctx carrying tx as a subscriber's transaction, for Joiner to find.
func Subscribe(ctx context.Context, tx driver.Tx) context.Context {
	return context.WithValue(ctx, subscriberKey{}, tx)
}

func (joiner) Joined(ctx context.Context) (driver.Tx, bool) {
	tx, ok := ctx.Value(subscriberKey{}).(driver.Tx)
	return tx, ok
}

// The maintenance operations are not modelled.

func (fake) TakeLock(context.Context, driver.Executor, dialect.LockParams) (bool, time.Time, error) {
	return false, time.Time{}, ErrUnsupported
}

func (fake) ExtendLock(context.Context, driver.Executor, dialect.LockParams) (bool, error) {
	return false, ErrUnsupported
}

func (fake) ReleaseLock(context.Context, driver.Executor, dialect.LockParams) error {
	return ErrUnsupported
}

func (fake) Consumers(context.Context, driver.Executor, string) ([]string, error) {
	return nil, ErrUnsupported
}

func (fake) CleanupBatch(context.Context, driver.Executor, dialect.CleanupBatchParams) (dialect.CleanupBatch, error) {
	return dialect.CleanupBatch{}, ErrUnsupported
}

func (fake) CountAbandoned(context.Context, driver.Executor, string, time.Time) (int64, error) {
	return 0, ErrUnsupported
}

func (fake) Remembers(context.Context, driver.Executor, string) ([]dialect.Memory, error) {
	return nil, ErrUnsupported
}

func (fake) Stats(context.Context, driver.Executor, string) (dialect.Stats, error) {
	return dialect.Stats{}, ErrUnsupported
}

func (fake) Forget(context.Context, driver.Executor, dialect.ForgetParams) (dialect.Forgotten, error) {
	return dialect.Forgotten{}, ErrUnsupported
}
