package fakedb

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Dialect returns the dialect of the fake database. It implements dialect.Dialect, dialect.AtCommitClaimer and
// dialect.Fingerprinter; the transactions it runs on must be the fake's.
func Dialect() dialect.Dialect { return fake{} }

type fake struct{}

var (
	_ dialect.AtCommitClaimer = fake{}
	_ dialect.Fingerprinter   = fake{}
)

// txOf returns the fake transaction behind ex, or panics: the fake dialect runs on the fake database only.
func txOf(ex driver.Executor) *Tx {
	if tx, ok := ex.(*Tx); ok {
		return tx
	}
	if n, ok := ex.(interface{ Native() any }); ok {
		if tx, ok := n.Native().(*Tx); ok {
			return tx
		}
	}
	panic(fmt.Sprintf("fakedb: a statement on a %T, not a fakedb transaction", ex))
}

func (fake) Name() string { return "fakedb" }

func (fake) Classify(err error) dialect.ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return dialect.Other
}

func (fake) JoinsSubscriberTx() bool { return true }

func (fake) ConsumerID(ctx context.Context, pool driver.Pool, _, consumer string) (int, error) {
	tx, err := pool.Begin(ctx, driver.TxOptions{})
	if err != nil {
		return 0, err
	}
	db := txOf(tx).db
	db.mu.Lock()
	id, ok := db.consumers[consumer]
	if !ok {
		db.nextID++
		id = db.nextID
		db.consumers[consumer] = id
	}
	db.mu.Unlock()
	return id, tx.Commit(ctx)
}

// checkConsumer fails a claim whose consumer id no longer names its consumer, before it looks for a row. The
// caller holds db.mu.
func (tx *Tx) checkConsumer(consumer string, id int, fresh bool) error {
	if !fresh && tx.db.consumers[consumer] != id {
		return &Error{Kind: dialect.StaleConsumer, Msg: fmt.Sprintf("consumer id %d does not name %s", id, consumer)}
	}
	return nil
}

// insert claims the row of k for tx in state, waiting for another writer of it to end, and reports whether tx
// owns it; false when a row is there. The caller holds db.mu.
func (tx *Tx) insert(ctx context.Context, k key, state string) (bool, error) {
	if err := tx.lock(ctx, k); err != nil {
		return false, err
	}
	if _, there := tx.read(k); there {
		return false, nil
	}
	tx.write(k, &row{state: state})
	return true, nil
}

func (fake) Claim(ctx context.Context, ex driver.Executor, p dialect.ClaimParams) (bool, error) {
	tx := txOf(ex)
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if err := tx.checkConsumer(p.Consumer, p.ConsumerID, p.Fresh); err != nil {
		return false, err
	}
	if len(tx.db.failClaims) > 0 {
		kind := tx.db.failClaims[0]
		tx.db.failClaims = tx.db.failClaims[1:]
		return false, &Error{Kind: kind, Msg: "the claim lost a lock conflict (injected)"}
	}
	return tx.insert(ctx, key{p.Consumer, p.ID}, p.State)
}

func (fake) ClaimBatch(ctx context.Context, ex driver.Executor, p dialect.ClaimBatchParams) ([]string, error) {
	tx := txOf(ex)
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if err := tx.checkConsumer(p.Consumer, p.ConsumerID, false); err != nil {
		return nil, err
	}
	ids := append([]string(nil), p.IDs...)
	sort.Strings(ids)
	var claimed []string
	for _, id := range ids {
		ok, err := tx.insert(ctx, key{p.Consumer, id}, p.State)
		if err != nil {
			return nil, err
		}
		if ok {
			claimed = append(claimed, id)
		}
	}
	return claimed, nil
}

// ClaimAtCommit returns the claim as a statement for Tx.CommitWith.
func (fake) ClaimAtCommit(p dialect.ClaimParams) (string, []any) {
	return claimAtCommit, []any{p.Consumer, p.ConsumerID, p.ID}
}

const claimAtCommit = "fakedb: claim at commit"

// ownRow runs f on the row of k that tx wrote itself, under db.mu; f's false reports no change.
func (tx *Tx) ownRow(ctx context.Context, k key, f func(r *row) bool) (bool, error) {
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if err := tx.lock(ctx, k); err != nil {
		return false, err
	}
	r, ok := tx.read(k)
	if !ok || !f(&r) {
		return false, nil
	}
	tx.write(k, &r)
	return true, nil
}

func (fake) Unclaim(ctx context.Context, ex driver.Executor, p dialect.RowParams) error {
	tx := txOf(ex)
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if err := tx.lock(ctx, key{p.Consumer, p.ID}); err != nil {
		return err
	}
	tx.write(key{p.Consumer, p.ID}, nil)
	return nil
}

func (fake) ReadRow(_ context.Context, ex driver.Executor, p dialect.RowParams) (string, []byte, error) {
	tx := txOf(ex)
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	r, ok := tx.read(key{p.Consumer, p.ID})
	if !ok {
		return "", nil, driver.ErrNoRows
	}
	return r.state, r.produced, nil
}

func (fake) SaveProduced(ctx context.Context, ex driver.Executor, p dialect.ProducedParams) error {
	_, err := txOf(ex).ownRow(ctx, key{p.Consumer, p.ID}, func(r *row) bool { r.produced = p.Produced; return true })
	return err
}

func (fake) Finish(ctx context.Context, ex driver.Executor, p dialect.ProducedParams) (bool, error) {
	return txOf(ex).ownRow(ctx, key{p.Consumer, p.ID}, func(r *row) bool {
		if r.state != "applying" {
			return false
		}
		r.state, r.produced = "done", p.Produced
		return true
	})
}

func (fake) TakeOver(ctx context.Context, ex driver.Executor, p dialect.ClaimParams) (bool, error) {
	tx := txOf(ex)
	now := tx.db.now()
	return tx.ownRow(ctx, key{p.Consumer, p.ID}, func(r *row) bool {
		if r.state != "released" && (r.state != "processing" || r.lockedUntil.After(now)) {
			return false
		}
		r.state, r.token, r.lockedUntil = p.State, "", time.Time{}
		return true
	})
}

func (fake) Savepoint(_ context.Context, ex driver.Executor, step dialect.SavepointStep) error {
	return txOf(ex).savepointStep(step)
}

func (fake) AddFingerprint(context.Context, driver.Executor, string) error { return nil }

func (fake) FingerprintColumn(context.Context, driver.Executor, string) (bool, string, error) {
	return true, "", nil
}

func (fake) SaveFingerprint(ctx context.Context, ex driver.Executor, p dialect.FingerprintParams) error {
	_, err := txOf(ex).ownRow(ctx, key{p.Consumer, p.ID}, func(r *row) bool { r.fingerprint = p.Fingerprint; return true })
	return err
}

func (fake) ReadFingerprint(_ context.Context, ex driver.Executor, p dialect.RowParams) ([]byte, error) {
	tx := txOf(ex)
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	r, ok := tx.read(key{p.Consumer, p.ID})
	if !ok {
		return nil, driver.ErrNoRows
	}
	return r.fingerprint, nil
}

func (fake) InspectSchema(context.Context, driver.Executor, string) (dialect.SchemaReport, error) {
	return dialect.SchemaReport{IDType: "text"}, nil
}

func (fake) Migrations(string, string) ([]dialect.Migration, error) {
	return []dialect.Migration{{Version: 1, Name: "fake"}}, nil
}

// Migrate has nothing to create: it runs the check, in a transaction of its own.
func (fake) Migrate(ctx context.Context, pool driver.Pool, p dialect.MigrateParams) (int, int, error) {
	tx, err := pool.Begin(ctx, driver.TxOptions{})
	if err != nil {
		return 0, 0, err
	}
	if p.Check != nil {
		if err := p.Check(ctx, tx, 1, 1); err != nil {
			return 0, 0, errors.Join(err, tx.Rollback(ctx))
		}
	}
	return 1, 1, tx.Commit(ctx)
}
