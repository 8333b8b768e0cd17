package inbox

import (
	"context"
	"fmt"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/maintain"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// opsStore runs the operations of retention and operations through the database's dialect: the cleanup, the
// retention alarm, stats and forget. They run from a cron job, a background Cleaner, a metrics scrape or an
// operator's terminal, never on a message's path, so they live apart from store.
type opsStore struct {
	d     dialect.Dialect
	table string
}

func newOpsStore(d dialect.Dialect, table string) *opsStore { return &opsStore{d: d, table: table} }

// env is what the maintenance passes of internal/maintain need: the pool, this store's dialect, table and error
// wrapping, the options' logger.
func (s *opsStore) env(pool driver.Pool, c config) maintain.Env {
	return maintain.Env{Pool: pool, Dialect: s.d, Table: s.table, Logger: c.logger, Wrap: s.wrap, Invalid: ErrInvalidOption,
		ShortTx: func(ctx context.Context, fn func(tx driver.Tx) error) error {
			return store.InShortTx(ctx, pool, s.d, fn)
		}}
}

// wrap adds the operation and the table to a driver error, and turns "no such table" into ErrSchemaMissing.
func (s *opsStore) wrap(op string, err error) error {
	if s.d.Classify(err) == dialect.NoTable {
		return fmt.Errorf("inbox: %s %s: %w: %w", op, s.table, ErrSchemaMissing, err)
	}
	return fmt.Errorf("inbox: %s %s: %w", op, s.table, store.PoolerHint(s.d, err))
}
