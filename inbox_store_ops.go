package inbox

import (
	"fmt"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// opsStore runs the operations of retention and operations through the database's dialect: the cleanup, the
// retention alarm, stats and forget. They run from a cron job, a background Cleaner, a metrics scrape or an
// operator's terminal, never on a message's path, so they live apart from store.
type opsStore struct {
	d     dialect.Dialect
	table string
}

func newOpsStore(d dialect.Dialect, table string) *opsStore { return &opsStore{d: d, table: table} }

// cleanupLockName is the cleanup's row in the locks table: one cleanup of the table at a time.
const cleanupLockName = "cleanup"

// wrap adds the operation and the table to a driver error, and turns "no such table" into ErrSchemaMissing.
func (s *opsStore) wrap(op string, err error) error {
	if s.d.Classify(err) == dialect.NoTable {
		return fmt.Errorf("inbox: %s %s: %w: %w", op, s.table, ErrSchemaMissing, err)
	}
	return fmt.Errorf("inbox: %s %s: %w", op, s.table, poolerHint(s.d, err))
}
