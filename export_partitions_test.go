package inbox

import (
	"time"

	"github.com/effectively-once/watermill-inbox/internal/maintain"
)

// UUID7Floor, PartitionName and PeriodStart are the partitions' arithmetic, for tests that build a partition or
// an ID of a given time.
func UUID7Floor(t time.Time) string                           { return maintain.UUID7Floor(t) }
func PartitionName(table string, from time.Time) string       { return maintain.PartitionName(table, from) }
func PeriodStart(t time.Time, period time.Duration) time.Time { return maintain.PeriodStart(t, period) }
