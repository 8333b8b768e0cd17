package inbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/dialect/postgres"
	"github.com/effectively-once/watermill-inbox/driver"
)

// BenchmarkPartitionCreation creates, b.N times, the partition of an hour far ahead whose 200 IDs wait in the
// default partition, while 8 workers claim new IDs of the current hour without pause, and reports how long a round
// took and the longest claim in the second around it: what claims pay while a partition is created beside the
// default partition, which the round moves rows out of under the table's SHARE lock. Run a few rounds:
//
//	go test -run '^$' -bench PartitionCreation -benchtime 3x .
func BenchmarkPartitionCreation(b *testing.B) {
	ctx := context.Background()
	db := openDB(b)
	table, opts := partitioned(b, db)
	ib, err := inbox.New(db, inboxOptions(opts, inbox.WithConsumer("wallet-credits"))...)
	if err != nil {
		b.Fatal(err)
	}
	h := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	pt := postgres.Dialect().(dialect.Partitioner)
	pool := driver.StdSQL(db)
	now := time.Now()
	var round, longest time.Duration
	next := 0
	for n := range b.N {
		far := inbox.PeriodStart(now.Add(time.Duration(200+n)*time.Hour), time.Hour)
		for k := range 200 {
			if _, err := h(newMsg(v7At(far.Add(time.Duration(k)*time.Millisecond), k))); err != nil {
				b.Fatal(err)
			}
		}
		var mu sync.Mutex
		var claims []time.Duration
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					if _, err := h(newMsg(v7At(now, next+w*1_000_000+k))); err != nil {
						continue // a claim that failed would be redelivered; only the applied ones are timed
					}
					mu.Lock()
					claims = append(claims, time.Since(start))
					mu.Unlock()
				}
			}()
		}
		time.Sleep(500 * time.Millisecond)
		p := dialect.PartitionParams{Table: table, Name: inbox.PartitionName(table, far), Default: table + "_default",
			From: inbox.UUID7Floor(far), To: inbox.UUID7Floor(far.Add(time.Hour))}
		start := time.Now()
		if err := inShortTxForTest(ctx, pool, func(tx driver.Tx) error { return pt.CreatePartition(ctx, tx, p) }); err != nil {
			b.Fatal(err)
		}
		round += time.Since(start)
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		next += 8_000_000
		longest = max(longest, slices.Max(claims))
	}
	b.ReportMetric(float64(round.Milliseconds())/float64(b.N), "round-ms")
	b.ReportMetric(float64(longest.Milliseconds()), "longest-claim-ms")
}
