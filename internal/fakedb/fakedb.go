// Package fakedb is an inbox database in memory, for tests of the inbox's modes that must run without a database
// (under -short): a driver.Pool whose transactions keep their writes private until they commit and lock the rows
// they write as a primary key does, and a dialect.Dialect over it (Dialect) with the semantics of the PostgreSQL
// dialect's statements for the message path, lease mode, the claim at commit and fingerprints. Maintenance
// (cleanup, stats, partitions) is not modelled: those operations fail with ErrUnsupported.
//
// A handler does its side effect on the transaction it finds in its message's context (inbox.NativeTxFromContext
// returns the *Tx): Tx.Credit adds to an account, and DB.Balance reads what committed. Faults a test can inject:
// DB.FailNextCommit, DB.RenumberConsumers and DB.Advance, the clock leases are measured by.
package fakedb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// ErrUnsupported is returned by the operations the fake does not model.
var ErrUnsupported = errors.New("fakedb: not modelled")

// Error is an error of the fake database, of the kind the dialect classifies it as.
type Error struct {
	Kind dialect.ErrorKind
	Msg  string
}

func (e *Error) Error() string { return "fakedb: " + e.Msg }

// key names one inbox row.
type key struct{ consumer, id string }

// row is one inbox row, as the PostgreSQL table holds it.
type row struct {
	state       string // done, applying, processing, released, failed
	produced    []byte
	fingerprint []byte
	token       string
	lockedUntil time.Time
	attempts    int
	lastError   string
}

// DB is the database: the committed rows and balances, the row locks of open transactions, and its clock.
type DB struct {
	mu         sync.Mutex
	changed    *sync.Cond // signalled whenever a transaction ends
	rows       map[key]row
	balances   map[string]int64
	locks      map[key]*Tx
	consumers  map[string]int
	nextID     int
	offset     time.Duration
	failCommit []error
	failClaims []dialect.ErrorKind
	commits    atomic.Int64
}

// New returns an empty database.
func New() *DB {
	db := &DB{rows: map[key]row{}, balances: map[string]int64{}, locks: map[key]*Tx{}, consumers: map[string]int{}}
	db.changed = sync.NewCond(&db.mu)
	return db
}

// Begin begins a transaction (driver.Pool).
func (db *DB) Begin(ctx context.Context, _ driver.TxOptions) (driver.Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &Tx{db: db, writes: map[key]*row{}, effects: map[string]int64{}}, nil
}

// now is the database's clock.
func (db *DB) now() time.Time { return time.Now().Add(db.offset) }

// Advance moves the database's clock forward by d: leases run out without waiting.
func (db *DB) Advance(d time.Duration) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.offset += d
}

// FailNextCommit makes the next commit fail with err, the transaction rolled back, as a connection lost before
// COMMIT reached the server does.
func (db *DB) FailNextCommit(err error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.failCommit = append(db.failCommit, err)
}

// FailNextClaims makes the next n claims of one message (Dialect's Claim) fail with an error of kind, before they
// look for their row: a deadlock between waiting inserts is dialect.LockConflict.
func (db *DB) FailNextClaims(n int, kind dialect.ErrorKind) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for range n {
		db.failClaims = append(db.failClaims, kind)
	}
}

// RenumberConsumers gives every registered consumer name a new id, as a consumers table made anew does.
func (db *DB) RenumberConsumers() {
	db.mu.Lock()
	defer db.mu.Unlock()
	for name := range db.consumers {
		db.nextID++
		db.consumers[name] = db.nextID
	}
}

// Balance returns account's committed balance.
func (db *DB) Balance(account string) int64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.balances[account]
}

// State returns the committed state of the row of (consumer, id), "" when there is none.
func (db *DB) State(consumer, id string) string {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.rows[key{consumer, id}].state
}

// Rows counts the committed rows.
func (db *DB) Rows() int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return len(db.rows)
}

// Commits counts the transactions that committed.
func (db *DB) Commits() int { return int(db.commits.Load()) }

// Tx is a transaction. Its writes and effects are its own until it commits; a row it writes is locked until it
// ends, and another transaction that writes the row waits for that.
type Tx struct {
	db      *DB
	writes  map[key]*row // nil: deleted
	effects map[string]int64
	saved   *savepoint
	done    bool
}

type savepoint struct {
	writes  map[key]*row
	effects map[string]int64
}

// Credit adds amount to account's balance when the transaction commits: the side effect of a test's handler.
func (tx *Tx) Credit(account string, amount int64) error {
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if tx.done {
		return driver.ErrTxDone
	}
	tx.effects[account] += amount
	return nil
}

// Native returns the transaction itself: what inbox.NativeTxFromContext gives a handler.
func (tx *Tx) Native() any { return tx }

// Exec, QueryRow and Query are not used: the fake's dialect works on the transaction directly.
func (tx *Tx) Exec(context.Context, string, ...any) (int64, error) { return 0, ErrUnsupported }

// QueryRow fails every query: see Exec.
func (tx *Tx) QueryRow(context.Context, string, ...any) driver.Row { return failedRow{} }

// Query fails every query: see Exec.
func (tx *Tx) Query(context.Context, string, ...any) (driver.Rows, error) { return nil, ErrUnsupported }

type failedRow struct{}

func (failedRow) Scan(...any) error { return ErrUnsupported }

// Commit makes the writes and effects durable and releases the locks, or fails as FailNextCommit says.
func (tx *Tx) Commit(ctx context.Context) error {
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if tx.done {
		return driver.ErrTxDone
	}
	if len(tx.db.failCommit) > 0 {
		err := tx.db.failCommit[0]
		tx.db.failCommit = tx.db.failCommit[1:]
		tx.endLocked()
		return err
	}
	for k, r := range tx.writes {
		if r == nil {
			delete(tx.db.rows, k)
			continue
		}
		if r.state == "applying" {
			tx.endLocked()
			return &Error{Kind: dialect.Other, Msg: fmt.Sprintf("commit: the row of %s/%s is still 'applying'", k.consumer, k.id)}
		}
		tx.db.rows[k] = *r
	}
	for account, n := range tx.effects {
		tx.db.balances[account] += n
	}
	tx.db.commits.Add(1)
	tx.endLocked()
	return nil
}

// Rollback drops the writes and effects and releases the locks.
func (tx *Tx) Rollback(context.Context) error {
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if tx.done {
		return driver.ErrTxDone
	}
	tx.endLocked()
	return nil
}

func (tx *Tx) endLocked() {
	tx.done = true
	for k, holder := range tx.db.locks {
		if holder == tx {
			delete(tx.db.locks, k)
		}
	}
	tx.db.changed.Broadcast()
}

// read returns the row of k as tx sees it: its own write, or the committed row. The caller holds db.mu.
func (tx *Tx) read(k key) (row, bool) {
	if r, ok := tx.writes[k]; ok {
		if r == nil {
			return row{}, false
		}
		return *r, true
	}
	r, ok := tx.db.rows[k]
	return r, ok
}

// lock takes the row lock of k for tx, waiting while another open transaction holds it, as a primary key makes a
// second writer of a row wait. The caller holds db.mu.
func (tx *Tx) lock(ctx context.Context, k key) error {
	if tx.done {
		return driver.ErrTxDone
	}
	stop := context.AfterFunc(ctx, func() {
		tx.db.mu.Lock()
		defer tx.db.mu.Unlock()
		tx.db.changed.Broadcast()
	})
	defer stop()
	for {
		holder, held := tx.db.locks[k]
		if !held || holder == tx {
			tx.db.locks[k] = tx
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		tx.db.changed.Wait()
	}
}

// write sets tx's own version of the row of k (nil deletes it). The caller holds db.mu and the lock of k.
func (tx *Tx) write(k key, r *row) { tx.writes[k] = r }

// savepointStep sets, rolls back to or releases the transaction's one savepoint.
func (tx *Tx) savepointStep(step dialect.SavepointStep) error {
	tx.db.mu.Lock()
	defer tx.db.mu.Unlock()
	if tx.done {
		return driver.ErrTxDone
	}
	switch step {
	case dialect.SetSavepoint:
		tx.saved = &savepoint{writes: cloneWrites(tx.writes), effects: maps.Clone(tx.effects)}
	case dialect.RollbackSavepoint:
		if tx.saved == nil {
			return &Error{Kind: dialect.Other, Msg: "no savepoint to roll back to"}
		}
		for k := range tx.writes {
			if _, kept := tx.saved.writes[k]; !kept && tx.db.locks[k] == tx {
				delete(tx.db.locks, k) // a subtransaction's row locks go with it
			}
		}
		tx.writes, tx.effects = cloneWrites(tx.saved.writes), maps.Clone(tx.saved.effects)
		tx.db.changed.Broadcast()
	case dialect.ReleaseSavepoint:
		if tx.saved == nil {
			return &Error{Kind: dialect.Other, Msg: "no savepoint to release"}
		}
		tx.saved = nil
	}
	return nil
}

func cloneWrites(w map[key]*row) map[key]*row {
	out := make(map[key]*row, len(w))
	for k, r := range w {
		if r != nil {
			c := *r
			r = &c
		}
		out[k] = r
	}
	return out
}
