package inbox

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// Stats is an operator's view of an inbox table, from ReadStats.
type Stats struct {
	// Table is the inbox table's name.
	Table string
	// Now is the database's clock when the stats were read; ages are measured from it.
	Now time.Time
	// Consumers has one entry per consumer, in order of name: on PostgreSQL every consumer the table has registered,
	// with rows or without; on MySQL and MariaDB every consumer with rows.
	Consumers []ConsumerStats
	// TableBytes is the heap with its TOAST, free-space and visibility maps (pg_table_size).
	TableBytes int64
	// IndexBytes is every index of the table (pg_indexes_size).
	IndexBytes int64
	// TotalBytes is both (pg_total_relation_size).
	TotalBytes int64
	// ConsumerIDs is how many consumer names the table can register in all: 32,767 on PostgreSQL, whose rows carry
	// a smallint id of their consumer; 0 on MySQL and MariaDB, whose rows carry the name and hold any number.
	ConsumerIDs int64
	// ConsumerIDsLeft is how many more names it can register, when ConsumerIDs is not 0. A registered name keeps its
	// id for good, running or not; at 0 a new name is refused with ErrConsumerIDsExhausted.
	ConsumerIDsLeft int64
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
	// Oldest is the last state change of its oldest row that the cleanup may delete, zero if it has none. It says
	// how old the rows are, not how far back the consumer remembers: a consumer that applied nothing for days
	// after the last cleanup's cutoff remembers those quiet days too.
	Oldest time.Time
	// RemembersSince is the time since which the consumer remembers every message it applied, as Remembers reports
	// it (ConsumerMemory.Oldest); zero when Remembers does not list the consumer.
	RemembersSince time.Time
	// Age is how far back it remembers, the age of RemembersSince as Remembers reports it (ConsumerMemory.Age):
	// what to compare with the longest redelivery of the consumer's sources. Zero if RemembersSince is.
	Age time.Duration
}

// ReadStats counts each consumer's rows by state, reads how far back each remembers (Remembers, in the same
// transaction), reads the table's size and how many consumer ids it has left. It reads every row, so on a large
// inbox it takes seconds to minutes: it is for an operator (the CLI's stats command), not for a metrics scrape,
// which has Remembers. It returns ErrSchemaMissing when the table does not exist. It reads WithTable.
func (d *Database) ReadStats(ctx context.Context, opts ...MaintenanceOption) (Stats, error) {
	if err := d.check("ReadStats: "); err != nil {
		return Stats{}, err
	}
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return Stats{}, err
	}
	ds, ms, err := d.ops(c.table).Stats(ctx)
	st := Stats{Table: c.table, Now: ds.Now, TableBytes: ds.TableBytes, IndexBytes: ds.IndexBytes, TotalBytes: ds.TotalBytes,
		ConsumerIDs: ds.ConsumerIDs, ConsumerIDsLeft: ds.ConsumerIDsLeft}
	if err != nil {
		return st, err
	}
	st.Consumers = mergeStats(ds.Consumers, ms)
	return st, nil
}

// mergeStats joins each consumer's counts with its memory, in order of name (byte by byte, whatever the database's
// collation). A consumer with memory and no rows (all of them cleaned up, or none yet) gets zero counts.
func mergeStats(counts []dialect.ConsumerStats, memory []dialect.Memory) []ConsumerStats {
	out := make([]ConsumerStats, 0, max(len(counts), len(memory)))
	at := make(map[string]int, len(counts))
	for _, dc := range counts {
		at[dc.Consumer] = len(out)
		out = append(out, ConsumerStats{Consumer: dc.Consumer, Rows: dc.Rows, Done: dc.Done, Failed: dc.Failed,
			Released: dc.Released, Processing: dc.Processing, Expired: dc.Expired, Oldest: dc.Oldest})
	}
	for _, m := range memory {
		i, ok := at[m.Consumer]
		if !ok {
			i = len(out)
			out = append(out, ConsumerStats{Consumer: m.Consumer})
		}
		out[i].RemembersSince, out[i].Age = m.Oldest, m.Now.Sub(m.Oldest)
	}
	slices.SortFunc(out, func(a, b ConsumerStats) int { return strings.Compare(a.Consumer, b.Consumer) })
	return out
}
