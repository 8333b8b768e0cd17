package inbox

import (
	"context"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/store"
)

// ConsumerMemory is how far back the inbox remembers the messages of one consumer.
type ConsumerMemory struct {
	// Consumer is the consumer's name.
	Consumer string
	// Oldest is the time since which the consumer remembers every message it applied, by the database clock. On
	// PostgreSQL it is when the consumer first claimed a message (for a table migrated to the compact layout, its
	// oldest row then), or the cutoff of the last cleanup if that is later; the cleanup records its cutoff before
	// it deletes anything. On MySQL and MariaDB it is the last state change (processed_at) of the consumer's
	// oldest row that the cleanup may delete; rows in 'processing' are left out, since an abandoned lease would
	// otherwise make the consumer look as if it remembered forever.
	Oldest time.Time
	// Age is how long ago Oldest was, by the database clock: a redelivery of a message applied within Age is
	// recognised.
	Age time.Duration
}

// Covers reports whether the consumer remembers at least window: whether a copy redelivered window after its
// message was applied would still be recognised.
func (m ConsumerMemory) Covers(window time.Duration) bool { return m.Age >= window }

// Remembers returns how far back the inbox remembers, for each consumer, in order of name. On PostgreSQL it reads
// the consumers table (every consumer the table has registered); on MySQL and MariaDB it costs one index probe per
// consumer that has rows the cleanup may delete. Either is cheap enough for every metrics scrape (the prommetrics package exports it as watermill_inbox_oldest_row_age_seconds).
//
// A consumer that started less than the window ago remembers less than the window, and no table can tell it from
// a consumer whose history was deleted too early: compare Age with the window only for consumers you know are
// older, or alert on a drop (docs/guides/retention.md). The Cleaner does the latter. Remembers reads WithTable.
func (d *Database) Remembers(ctx context.Context, opts ...MaintenanceOption) ([]ConsumerMemory, error) {
	if err := d.check("Remembers: "); err != nil {
		return nil, err
	}
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return nil, err
	}
	return remembers(ctx, d.ops(c.table))
}

func remembers(ctx context.Context, o store.Ops) ([]ConsumerMemory, error) {
	ms, err := o.Remembers(ctx)
	if err != nil {
		return nil, err
	}
	var out []ConsumerMemory
	for _, m := range ms {
		out = append(out, ConsumerMemory{Consumer: m.Consumer, Oldest: m.Oldest, Age: m.Now.Sub(m.Oldest)})
	}
	return out, nil
}
