package inbox

import "time"

// UUID7Floor, PartitionName and PeriodStart are the partitions' arithmetic, for tests that build a partition or
// an ID of a given time.
func UUID7Floor(t time.Time) string                           { return uuid7Floor(t) }
func PartitionName(table string, from time.Time) string       { return partitionName(table, from) }
func PeriodStart(t time.Time, period time.Duration) time.Time { return periodStart(t, period) }
