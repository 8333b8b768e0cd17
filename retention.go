package inbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/driver"
)

// ErrShortMemory reports a consumer whose inbox remembers less than the redelivery window declared for it: a
// copy redelivered from before its oldest row would be applied again. The Cleaner logs it; Remembers and
// ConsumerMemory.Covers let you check for it yourself.
var ErrShortMemory = errors.New("inbox: remembers less than the redelivery window")

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
	pool := d.pool
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return nil, err
	}
	return newOpsStore(d.dialect, c.table).remembers(ctx, pool)
}

func (s *opsStore) remembers(ctx context.Context, pool driver.Pool) ([]ConsumerMemory, error) {
	var out []ConsumerMemory
	err := inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		ms, err := s.d.Remembers(ctx, tx, s.table)
		out = nil
		for _, m := range ms {
			out = append(out, ConsumerMemory{Consumer: m.Consumer, Oldest: m.Oldest, Age: m.Now.Sub(m.Oldest)})
		}
		return err
	})
	if err != nil {
		return nil, s.wrap("read oldest rows", err)
	}
	return out, nil
}

// memoryWatch is the Cleaner's retention alarm. It compares each consumer's memory with the declared window, and
// raises the alarm only for a consumer it has seen covering the window before: a consumer that started less than
// the window ago remembers less than the window too, and is no fault. A consumer seen short from the start is
// noted once at info level instead, since it may also be one whose history was cut before this process started;
// the oldest-row age metric, kept by Prometheus across restarts, catches that case (docs/guides/retention.md).
type memoryWatch struct {
	window  time.Duration
	mu      sync.Mutex
	covered map[string]bool // seen remembering at least window
	noted   map[string]bool // seen short before ever covering, and logged once
}

func newMemoryWatch(window time.Duration) *memoryWatch {
	return &memoryWatch{window: window, covered: map[string]bool{}, noted: map[string]bool{}}
}

// check logs what ms says about the window and returns the consumers whose memory dropped below it.
func (w *memoryWatch) check(ms []ConsumerMemory, table string, logger watermill.LoggerAdapter) (dropped []ConsumerMemory) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range ms {
		fields := watermill.LogFields{
			"table":     table,
			"consumer":  m.Consumer,
			"remembers": m.Age.Round(time.Second).String(),
			"window":    w.window.String(),
			"oldest":    m.Oldest,
		}
		switch {
		case m.Covers(w.window):
			w.covered[m.Consumer] = true
		case w.covered[m.Consumer]:
			dropped = append(dropped, m)
			logger.Error("Inbox remembers less than the redelivery window: rows were deleted too early",
				fmt.Errorf("%w: consumer %s remembers %s, the window is %s", ErrShortMemory, m.Consumer,
					m.Age.Round(time.Second), w.window), fields)
		case !w.noted[m.Consumer]:
			w.noted[m.Consumer] = true
			logger.Info("Inbox remembers less than the redelivery window for a consumer younger than the window, "+
				"or whose history was deleted before this cleaner started", fields)
		}
	}
	return dropped
}
