package inbox_test

import (
	"context"
	"fmt"

	inbox "github.com/effectively-once/watermill-inbox"
)

// An inbox with 25,000 rows older than the retention and 100 recent ones is cleaned in bounded batches; the
// recent rows stay.
func ExampleDatabase_Cleanup() {
	ctx := context.Background()
	db, table, drop, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if err := inbox.OnSQL(db).Migrate(ctx, inbox.WithTable(table)); err != nil {
		fmt.Println(err)
		return
	}
	// A month of history, as if the table had never been cleaned, and the rows of the last minutes.
	// The table stores each consumer's name once, in its consumers table, and processed_at in minutes since 1970.
	if _, err := db.Exec(`INSERT INTO ` + table + `_consumers (name, created_at) VALUES ('wallet-credits', now() - interval '30 days');
		INSERT INTO ` + table + ` (consumer_id, message_id, processed_at)
		SELECT c.id, 'evt-' || g, floor(extract(epoch FROM now() - interval '30 days' + g * interval '1 second') / 60)::integer
		FROM ` + table + `_consumers c, generate_series(1, 25000) g WHERE c.name = 'wallet-credits';
		INSERT INTO ` + table + ` (consumer_id, message_id)
		SELECT c.id, 'new-' || g FROM ` + table + `_consumers c, generate_series(1, 100) g WHERE c.name = 'wallet-credits'`); err != nil {
		fmt.Println(err)
		return
	}

	// Each batch deletes at most BatchSize rows: the cleanup walks the pages that hold expired rows in windows of
	// about a batch each, so how many rows a batch finds depends on how the rows lie in the pages.
	var largest int64
	res, err := inbox.OnSQL(db).Cleanup(ctx, inbox.CleanupParams{
		Retention: inbox.DefaultRetention, // 14 days
		BatchSize: inbox.DefaultCleanupBatch,
		Progress:  func(p inbox.CleanupProgress) { largest = max(largest, p.Deleted) },
	}, inbox.WithTable(table))
	if err != nil {
		fmt.Println(err)
		return
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&left); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("no batch deleted more than", inbox.DefaultCleanupBatch, "rows:", largest <= inbox.DefaultCleanupBatch)
	fmt.Println("deleted", res.Deleted, "in more than one batch:", res.Batches > 1)
	fmt.Println(left, "rows left")
	// Output:
	// no batch deleted more than 10000 rows: true
	// deleted 25000 in more than one batch: true
	// 100 rows left
}
