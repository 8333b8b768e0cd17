package mysqlinbox

import (
	"context"
	"fmt"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// utcTime scans one of the inbox's DATETIME(6) values, which hold UTC (the migration says why), whatever the
// connection string's parseTime: go-sql-driver/mysql returns a time.Time with parseTime=true, and the text of the
// value without it, its default. Requiring the flag would make a forgotten one fail only in the operations that
// read times (stats, cleanup, Remembers, Forget), long after the inbox began to apply messages.
type utcTime struct {
	Time  time.Time
	Valid bool // false for NULL
}

// datetimeLayout is how MySQL and MariaDB write a DATETIME as text; a fraction of a second after it is read too.
const datetimeLayout = "2006-01-02 15:04:05"

// Scan implements sql.Scanner.
func (u *utcTime) Scan(v any) error {
	var text string
	switch v := v.(type) {
	case nil:
		*u = utcTime{}
		return nil
	case time.Time:
		// The driver read the DATETIME's wall clock in the connection string's loc: the same wall clock in UTC is
		// the value.
		*u = utcTime{Time: time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC), Valid: true}
		return nil
	case []byte:
		text = string(v)
	case string:
		text = v
	default:
		return fmt.Errorf("mysqlinbox: read a time from %T", v)
	}
	t, err := time.ParseInLocation(datetimeLayout, text, time.UTC)
	if err != nil {
		return fmt.Errorf("mysqlinbox: read a time: %w", err)
	}
	*u = utcTime{Time: t, Valid: true}
	return nil
}

// utcArg is t as a statement's parameter for a DATETIME(6) column in UTC: its text, since go-sql-driver/mysql
// would write a time.Time as its wall clock in the connection string's loc.
func utcArg(t time.Time) string {
	if t.IsZero() {
		return "0000-00-00" // as the driver writes a zero time.Time
	}
	return t.UTC().Format(datetimeLayout + ".999999")
}

// scanMemories runs a query returning (consumer, oldest, now) per consumer (dialect.ScanMemories, with its times
// read by utcTime).
func scanMemories(ctx context.Context, q driver.Executor, query string) ([]dialect.Memory, error) {
	var out []dialect.Memory
	err := dialect.ScanRows(ctx, q, query, nil, func(r driver.Rows) error {
		var consumer string
		var oldest, now utcTime
		err := r.Scan(&consumer, &oldest, &now)
		out = append(out, dialect.Memory{Consumer: consumer, Oldest: oldest.Time, Now: now.Time})
		return err
	})
	return out, err
}

// scanConsumerStats runs a query returning (consumer, rows, done, failed, released, processing, expired, oldest)
// per consumer, oldest NULL when the consumer has no row the cleanup may delete (dialect.ScanConsumerStats, with
// its time read by utcTime).
func scanConsumerStats(ctx context.Context, q driver.Executor, query string) ([]dialect.ConsumerStats, error) {
	var out []dialect.ConsumerStats
	err := dialect.ScanRows(ctx, q, query, nil, func(r driver.Rows) error {
		var cs dialect.ConsumerStats
		var oldest utcTime
		err := r.Scan(&cs.Consumer, &cs.Rows, &cs.Done, &cs.Failed, &cs.Released, &cs.Processing, &cs.Expired, &oldest)
		cs.Oldest = oldest.Time
		out = append(out, cs)
		return err
	})
	return out, err
}
