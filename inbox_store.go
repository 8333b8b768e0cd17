package inbox

import (
	"context"
	"errors"

	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/batch"
	"github.com/effectively-once/watermill-inbox/internal/maintain"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// Every statement the inbox runs on a message's path goes through one store (internal/store): the claims, the
// reads of a row, the produced messages, the savepoints of a joined transaction, the lease's compare-and-sets, the
// fingerprints and the claim sent with COMMIT. It runs them through the database's dialect, which holds their SQL,
// and it alone classifies the database's errors: what a caller branches on comes back as one of the sentinels this
// package exports (ErrSchemaMissing, ErrInvalidEventID, ErrConsumerIDsExhausted, ErrProducedUnstorable,
// ErrLeaseLost), and a claim's stale consumer id as store.ErrStaleConsumer, which the middleware claims again after.
//
// batchStore is that store as the batch engine (internal/batch) uses it.
type batchStore struct{ *store.Store }

var _ batch.Store = batchStore{}

// SaveProduced stores a member's produced messages; ones the database refuses come back unusable, which the
// member's Failed dead-letters.
func (s batchStore) SaveProduced(ctx context.Context, tx driver.Tx, consumer, id string, raw []byte) error {
	err := s.Store.SaveProduced(ctx, tx, consumer, id, raw)
	if errors.Is(err, ErrProducedUnstorable) {
		return unusable{err}
	}
	return err
}

// ops is the store of the operations off a message's path (cleanup, partitions, the retention watch, stats and
// Forget) on table.
func (d *Database) ops(table string) store.Ops {
	return store.Ops{Pool: d.pool, Dialect: d.dialect, Table: table}
}

// maintainEnv is what internal/maintain's passes work with: the store of operations and the options' logger.
func maintainEnv(o store.Ops, c config) maintain.Env {
	return maintain.Env{Ops: o, Logger: c.logger, Invalid: ErrInvalidOption}
}
