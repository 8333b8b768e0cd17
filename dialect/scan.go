package dialect

import (
	"context"
	"database/sql"
	"errors"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Helpers for dialects whose queries return the rows of Remembers and Stats in the order their types list the
// fields, so that each dialect writes its SQL and none repeats the scanning.

// Found scans a row that is there when a statement took effect or a condition holds, into dest, and reports
// whether it was there: no row is false with no error.
func Found(row driver.Row, dest any) (bool, error) {
	err := row.Scan(dest)
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// CheckColumnType reads a column's type from row (one text column; no row when the column does not exist) and
// returns FingerprintColumn's results: whether the column exists and, when its type is not want, what is wrong.
func CheckColumnType(row driver.Row, table, column, want string) (exists bool, problem string, err error) {
	var typ string
	if exists, err = Found(row, &typ); !exists || err != nil {
		return false, "", err
	}
	if typ != want {
		problem = "table " + table + ": column " + column + " is " + typ + ", want " + want
	}
	return true, problem, nil
}

// ScanRows runs query on q and calls scan for each row it returns.
func ScanRows(ctx context.Context, q driver.Executor, query string, args []any, scan func(driver.Rows) error) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// ScanMemories runs a query returning (consumer, oldest, now) per consumer.
func ScanMemories(ctx context.Context, q driver.Executor, query string) ([]Memory, error) {
	var out []Memory
	err := ScanRows(ctx, q, query, nil, func(r driver.Rows) error {
		var m Memory
		err := r.Scan(&m.Consumer, &m.Oldest, &m.Now)
		out = append(out, m)
		return err
	})
	return out, err
}

// ScanConsumerStats runs a query returning (consumer, rows, done, failed, released, processing, expired, oldest)
// per consumer, oldest NULL when the consumer has no row the cleanup may delete.
func ScanConsumerStats(ctx context.Context, q driver.Executor, query string) ([]ConsumerStats, error) {
	var out []ConsumerStats
	err := ScanRows(ctx, q, query, nil, func(r driver.Rows) error {
		var cs ConsumerStats
		var oldest sql.NullTime
		err := r.Scan(&cs.Consumer, &cs.Rows, &cs.Done, &cs.Failed, &cs.Released, &cs.Processing, &cs.Expired, &oldest)
		cs.Oldest = oldest.Time
		out = append(out, cs)
		return err
	})
	return out, err
}
