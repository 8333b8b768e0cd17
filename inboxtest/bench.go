package inboxtest

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// InFlightCounts are the numbers of messages in flight the throughput benchmarks run at: one, a few partitions,
// a prefetch window, and as many as one batch holds.
var InFlightCounts = []int{1, 4, 8, 64}

// InFlight runs handle b.N times from n goroutines at once, as a router with n messages in flight would, and
// reports msgs/s. handle gets the message's number, unique within the benchmark run.
func InFlight(b *testing.B, n int, handle func(i int) error) {
	b.Helper()
	var next atomic.Int64
	var failed atomic.Pointer[error]
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) || failed.Load() != nil {
					return
				}
				if err := handle(int(i)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
