package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Stats is an operator's view of an inbox table, from ReadStats.
type Stats struct {
	// Table is the inbox table's name.
	Table string
	// Now is the database's clock when the stats were read; ages are measured from it.
	Now time.Time
	// Consumers has one entry per consumer with rows, in order of name.
	Consumers []ConsumerStats
	// TableBytes is the heap with its TOAST, free-space and visibility maps (pg_table_size).
	TableBytes int64
	// IndexBytes is every index of the table (pg_indexes_size).
	IndexBytes int64
	// TotalBytes is both (pg_total_relation_size).
	TotalBytes int64
}

// ConsumerStats counts one consumer's rows by state.
type ConsumerStats struct {
	// Consumer is the consumer's name.
	Consumer string
	// Rows counts all its rows.
	Rows int64
	// Done, Failed and Released count its rows in those states; Failed and Released occur in lease mode only.
	Done, Failed, Released int64
	// Processing counts lease-mode rows whose holder's lease is live.
	Processing int64
	// Expired counts 'processing' rows whose lease ran out: the holder died or hung, and no copy has taken the row
	// over yet. The cleanup never deletes them; old ones need an operator (see Cleanup).
	Expired int64
	// Oldest is the last state change of its oldest row that the cleanup may delete, zero if it has none.
	Oldest time.Time
	// Age is how far back it remembers, Now - Oldest; zero if Oldest is.
	Age time.Duration
}

// ReadStats counts each consumer's rows by state and reads the table's size. It reads every row, so on a large
// inbox it takes seconds to minutes: it is for an operator (the CLI's stats command), not for a metrics scrape,
// which has Remembers. It returns ErrSchemaMissing when the table does not exist.
func ReadStats(ctx context.Context, db *sql.DB, opts ...Option) (Stats, error) {
	if db == nil {
		return Stats{}, fmt.Errorf("%w: ReadStats: db is nil", ErrInvalidOption)
	}
	return stdDatabase(db).ReadStats(ctx, opts...)
}

// ReadStats does on d what the package-level ReadStats does on a *sql.DB.
func (d *Database) ReadStats(ctx context.Context, opts ...Option) (Stats, error) {
	if d == nil || d.pool == nil {
		return Stats{}, fmt.Errorf("%w: ReadStats: the database is nil", ErrInvalidOption)
	}
	pool := d.pool
	c, err := newConfig(opts)
	if err != nil {
		return Stats{}, err
	}
	s := newOpsStore(d.dialect, c.table)
	st := Stats{Table: c.table}
	var exists bool
	err = inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		ds, err := s.d.Stats(ctx, tx, c.table)
		st = Stats{Table: c.table, Now: ds.Now, TableBytes: ds.TableBytes, IndexBytes: ds.IndexBytes, TotalBytes: ds.TotalBytes}
		exists = ds.Exists
		for _, dc := range ds.Consumers {
			cs := ConsumerStats{Consumer: dc.Consumer, Rows: dc.Rows, Done: dc.Done, Failed: dc.Failed,
				Released: dc.Released, Processing: dc.Processing, Expired: dc.Expired}
			if !dc.Oldest.IsZero() {
				cs.Oldest, cs.Age = dc.Oldest, st.Now.Sub(dc.Oldest)
			}
			st.Consumers = append(st.Consumers, cs)
		}
		return err
	})
	if err != nil {
		return st, s.wrap("read stats of", err)
	}
	if !exists {
		return st, fmt.Errorf("inbox: read stats of %s: %w", c.table, ErrSchemaMissing)
	}
	return st, nil
}
