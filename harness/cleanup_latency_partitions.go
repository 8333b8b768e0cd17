package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/maintain"
)

// latencyPartitionPeriod is the partition drop scenario's WithPartitions period: an hour, so that a day of expired
// rows lies in some twenty-five partitions and the cleanup drops that many, one transaction each.
const latencyPartitionPeriod = time.Hour

// latencyPartitionOptions are the inbox options of a partitioned table of the measurement, for Migrate and Cleanup.
func latencyPartitionOptions(table string) []inbox.MaintenanceOption {
	return []inbox.MaintenanceOption{inbox.WithTable(table), inbox.WithIDType(inbox.IDTypeUUID), inbox.WithPartitions(latencyPartitionPeriod)}
}

// latencyFillV7SQL fills a partitioned inbox table with $1 rows of consumer $2 whose IDs are UUIDv7: their times
// spread evenly from $3 seconds before $5 (the database's clock, in Unix milliseconds) to $4 seconds before it,
// their random bits from md5 of the row number, processed_at the minute of the ID's time. Each row lands in the
// partition of its ID's hour. The consumer is registered first and dated back to the oldest row, as in
// latencyFillSQL. The rows go in in ID order, so each partition's primary key fills by appending.
const latencyFillV7SQL = `WITH consumer AS (
		INSERT INTO %[2]s (name, created_at) VALUES ($2, to_timestamp(($5::bigint - ($3::float8 * 1000)::bigint) / 1000.0))
		ON CONFLICT (name) DO UPDATE SET created_at = least(%[2]s.created_at, excluded.created_at)
		RETURNING id
	), ids AS (
		SELECT $5::bigint - ($3::float8 * 1000)::bigint
				+ (($3::float8 - $4::float8) * 1000 * (i - 1) / greatest($1::int - 1, 1))::bigint AS ms,
			md5(i::text) AS h
		FROM generate_series(1, $1::int) i
	)
	INSERT INTO %[1]s (processed_at, consumer_id, message_id, state)
	SELECT (ids.ms / 60000)::integer, consumer.id,
		(lpad(to_hex(ids.ms), 12, '0') || '7' || substr(ids.h, 1, 3) || '8' || substr(ids.h, 4, 15))::uuid, 'd'
	FROM consumer, ids
	ORDER BY 3`

// partitionedTable creates a table with Database.Migrate and WithPartitions, then, beside the partitions Migrate made
// (an hour back to inbox.PartitionsAhead ahead), the partitions of a day of expired rows (the batched delete's day,
// ending an hour before the retention's cutoff) and of the last day, named and bounded as the library names and
// bounds its own; it fills them with expired and live rows, and makes the rows as old as they claim to be, as
// table does. It returns how many partitions hold the expired rows: the ones a cleanup must drop.
func (b *latencyBench) partitionedTable(ctx context.Context, expired, live int) (table string, expiredParts int, drop func(), err error) {
	b.tables++
	table = fmt.Sprintf("%s_%d", b.prefix, b.tables)
	drop = b.dropper(table)
	b.uuid7[table] = true
	if err := inbox.OnSQL(b.watchDB).Migrate(ctx, latencyPartitionOptions(table)...); err != nil {
		return table, 0, drop, fmt.Errorf("migrate %s: %w", table, err)
	}
	var now time.Time
	if err := b.watchDB.QueryRowContext(ctx, `SELECT now()`).Scan(&now); err != nil {
		return table, 0, drop, err
	}
	retention := inbox.DefaultRetention.Seconds()
	expOldest, expNewest := retention+25*3600, retention+3600
	liveOldest, liveNewest := 23*3600.0, 60.0
	if expiredParts, err = b.createPartitions(ctx, table, now, expOldest, expNewest, false); err != nil {
		return table, 0, drop, err
	}
	if _, err = b.createPartitions(ctx, table, now, liveOldest, liveNewest, true); err != nil {
		return table, 0, drop, err
	}
	start := time.Now()
	fill := fmt.Sprintf(latencyFillV7SQL, pq.QuoteIdentifier(table), pq.QuoteIdentifier(table+"_consumers"))
	for _, seg := range []struct {
		rows           int
		oldest, newest float64
	}{{expired, expOldest, expNewest}, {live, liveOldest, liveNewest}} {
		if _, err := b.watchDB.ExecContext(ctx, fill, seg.rows, latencyConsumer, seg.oldest, seg.newest, now.UnixMilli()); err != nil {
			return table, 0, drop, fmt.Errorf("fill %s: %w", table, err)
		}
	}
	filled := time.Since(start)
	var inDefault int
	if err := b.watchDB.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(table+"_default")).Scan(&inDefault); err != nil {
		return table, 0, drop, err
	}
	if inDefault != 0 {
		return table, 0, drop, fmt.Errorf("fill %s: %d rows fell into the default partition: the partitions do not cover them", table, inDefault)
	}
	if err := b.settle(ctx, table); err != nil {
		return table, 0, drop, err
	}
	b.logf("%s: %s expired rows in %d partitions of an hour and %s live rows in %s, ready in %s", table,
		thousands(float64(expired)), expiredParts, thousands(float64(live)), filled.Round(100*time.Millisecond),
		time.Since(start).Round(100*time.Millisecond))
	return table, expiredParts, drop, nil
}

// createPartitions creates the partitions of table, each an hour, that hold the IDs from oldest to newest seconds
// before now, named and bounded as the library names and bounds its own, and returns how many it created.
// ifNotExists skips those that exist: Migrate made the partitions of the last hour and of the next two days. The
// statements go in one round trip and one transaction: two weeks of hours are hundreds of them.
func (b *latencyBench) createPartitions(ctx context.Context, table string, now time.Time, oldest, newest float64, ifNotExists bool) (int, error) {
	var qs []string
	end := now.Add(-time.Duration(newest * float64(time.Second)))
	for from := maintain.PeriodStart(now.Add(-time.Duration(oldest*float64(time.Second))), latencyPartitionPeriod); from.Before(end); from = from.Add(latencyPartitionPeriod) {
		q := `CREATE TABLE `
		if ifNotExists {
			q += `IF NOT EXISTS `
		}
		qs = append(qs, q+pq.QuoteIdentifier(maintain.PartitionName(table, from))+` PARTITION OF `+pq.QuoteIdentifier(table)+
			` FOR VALUES FROM ('`+maintain.UUID7Floor(from)+`') TO ('`+maintain.UUID7Floor(from.Add(latencyPartitionPeriod))+`')`)
	}
	if len(qs) == 0 {
		return 0, nil
	}
	// Without parameters, the statements go as one simple query, which PostgreSQL runs in one transaction.
	if _, err := b.watchDB.ExecContext(ctx, strings.Join(qs, ";\n")); err != nil {
		return 0, fmt.Errorf("create the partitions of %s: %w", table, err)
	}
	return len(qs), nil
}

// expectNoExpired fails when table still holds a row older than the retention.
func (b *latencyBench) expectNoExpired(ctx context.Context, table string) error {
	var n int
	err := b.watchDB.QueryRowContext(ctx, `SELECT count(*) FROM `+pq.QuoteIdentifier(table)+
		` WHERE processed_at < floor(extract(epoch FROM now()) / 60)::integer - $1::integer`,
		int(inbox.DefaultRetention/time.Minute)).Scan(&n)
	if err != nil {
		return fmt.Errorf("count the expired rows left in %s: %w", table, err)
	}
	if n != 0 {
		return fmt.Errorf("the cleanup left %d expired rows in %s", n, table)
	}
	return nil
}
