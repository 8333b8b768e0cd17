//go:build !unix

package pgxinbox_test

import "time"

// processCPU is unknown here: the benchmark leaves out its CPU metric.
func processCPU() (time.Duration, bool) { return 0, false }
