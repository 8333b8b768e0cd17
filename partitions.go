package inbox

import (
	"time"
)

// WithPartitions keeps the inbox table as partitions by ranges of event ID, one per period of UUIDv7 time (the
// first 48 bits of a UUIDv7 are its creation time in milliseconds), so that retention drops whole partitions
// instead of deleting rows. It needs WithIDType(IDTypeUUID), producers that send UUIDv7 event IDs (see
// StampUUIDv7), and PostgreSQL; period is whole minutes, a day suits most inboxes.
//
// Give it to Migrate, which then creates a new inbox table partitioned, with a default partition and partitions
// from one period back to PartitionsAhead ahead (an existing table keeps its shape: an unpartitioned one is
// refused), and to NewCleaner or Cleanup, whose every round creates the partitions PartitionsAhead ahead and
// drops each partition whose whole range lies before the retention's cutoff, with the produced messages of its
// range. IDs outside every partition (not v7, or older than the oldest partition) land in the default partition,
// which the round cleans row by row as it cleans an unpartitioned table; a partition created later takes the
// rows of its range out of the default partition.
//
// A partition is dropped by the age of its IDs, that is when the producer created them, not when they were
// applied: keep the retention above the window of redeliveries plus your longest delay between producing and
// applying a message. The middleware ignores the option.
func WithPartitions(period time.Duration) SharedOption {
	return sharedOption(func(c *config) { c.partitionPeriod = period })
}
