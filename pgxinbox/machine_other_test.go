//go:build !linux

package pgxinbox_test

// machineTicks is unknown here: the benchmark leaves out its machine-wide metrics.
func machineTicks() (busy, idle int64, cpus int, ok bool) { return 0, 0, 0, false }
