package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// ErrNotFound is a Forget that found no row for its consumer and event ID.
var ErrNotFound = errors.New("inbox: no such inbox row")

// Ops is the store of what runs off a message's path: the cleanup rounds, the partitions, the retention watch,
// Stats and Forget, run from a cron job, a background Cleaner, a metrics scrape or an operator's terminal. Like
// Store for the message path, it is where their database errors are classified; internal/maintain and the inbox
// package only branch on what it returns. Each operation asks Dialect for the concern it runs (Maintenance,
// Locks) once, when it starts.
type Ops struct {
	Pool    driver.Pool
	Dialect dialect.Dialect
	Table   string
}

// ShortTx runs fn in a short transaction of its own (InShortTx).
func (o Ops) ShortTx(ctx context.Context, fn func(tx driver.Tx) error) error {
	return InShortTx(ctx, o.Pool, o.Dialect, fn)
}

// Wrap names the operation and the table in a database error, and turns "no such table" into ErrSchemaMissing.
func (o Ops) Wrap(op string, err error) error {
	if o.Dialect.Classify(err) == dialect.NoTable {
		return fmt.Errorf("inbox: %s %s: %w: %w", op, o.Table, ErrSchemaMissing, err)
	}
	return fmt.Errorf("inbox: %s %s: %w", op, o.Table, PoolerHint(o.Dialect, err))
}

// LockTaken reports whether err is a statement that gave up waiting for a lock another transaction held (its
// lock_timeout ran out, or it lost a deadlock): maintenance leaves that work for its next pass.
func (o Ops) LockTaken(err error) bool {
	return err != nil && o.Dialect.Classify(err) == dialect.LockConflict
}

// Remembers reads, for each consumer, since when it remembers every message it applied.
func (o Ops) Remembers(ctx context.Context) ([]dialect.Memory, error) {
	var ms []dialect.Memory
	m := o.Dialect.Maintenance()
	err := o.ShortTx(ctx, func(tx driver.Tx) (err error) {
		ms, err = m.Remembers(ctx, tx, o.Table)
		return err
	})
	if err != nil {
		return nil, o.Wrap("read oldest rows", err)
	}
	return ms, nil
}

// Stats reads the table's sizes and each consumer's counts, and, in the same transaction, what each remembers.
// A table that does not exist is ErrSchemaMissing.
func (o Ops) Stats(ctx context.Context) (dialect.Stats, []dialect.Memory, error) {
	var (
		st dialect.Stats
		ms []dialect.Memory
		m  = o.Dialect.Maintenance()
	)
	err := o.ShortTx(ctx, func(tx driver.Tx) (err error) {
		if st, err = m.Stats(ctx, tx, o.Table); err != nil || !st.Exists {
			return err
		}
		ms, err = m.Remembers(ctx, tx, o.Table)
		return err
	})
	switch {
	case err != nil:
		return st, nil, o.Wrap("read stats of", err)
	case !st.Exists:
		return st, nil, fmt.Errorf("inbox: read stats of %s: %w", o.Table, ErrSchemaMissing)
	}
	return st, ms, nil
}

// Forget deletes the row of p (its Table is the store's), both of its statements in one short transaction:
// behind a transaction-pooling proxy each statement must be in one. An ID the table's column cannot hold (not a
// UUID, in a uuid column) is ErrNotFound: no row can have it.
func (o Ops) Forget(ctx context.Context, p dialect.ForgetParams) (dialect.Forgotten, error) {
	p.Table = o.Table
	var f dialect.Forgotten
	m := o.Dialect.Maintenance()
	err := o.ShortTx(ctx, func(tx driver.Tx) (err error) {
		f, err = m.Forget(ctx, tx, p)
		return err
	})
	switch {
	case o.Dialect.Classify(err) == dialect.IDRefused:
		return dialect.Forgotten{}, fmt.Errorf("inbox: forget %s/%s: %w (the table stores UUIDs)", p.Consumer, p.ID, ErrNotFound)
	case err != nil:
		return dialect.Forgotten{}, o.Wrap("forget "+p.Consumer+"/"+p.ID+" in", err)
	}
	return f, nil
}
