package inbox_test

import (
	"context"
	"fmt"

	inbox "github.com/effectively-once/watermill-inbox"
)

// An inbox with 25,000 rows older than the retention and 100 recent ones is cleaned in bounded batches; the
// recent rows stay.
func ExampleCleanup() {
	ctx := context.Background()
	db, table, drop, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if err := inbox.Migrate(ctx, db, inbox.WithTable(table)); err != nil {
		fmt.Println(err)
		return
	}
	// A month of history, as if the table had never been cleaned, and the rows of the last minutes.
	if _, err := db.Exec(`INSERT INTO ` + table + ` (consumer, message_id, processed_at)
		SELECT 'wallet-credits', 'evt-' || g, now() - interval '30 days' + g * interval '1 second'
		FROM generate_series(1, 25000) g;
		INSERT INTO ` + table + ` (consumer, message_id)
		SELECT 'wallet-credits', 'new-' || g FROM generate_series(1, 100) g`); err != nil {
		fmt.Println(err)
		return
	}

	res, err := inbox.Cleanup(ctx, db, inbox.CleanupParams{
		Retention: inbox.DefaultRetention, // 14 days
		BatchSize: inbox.DefaultCleanupBatch,
		Progress:  func(p inbox.CleanupProgress) { fmt.Println("batch", p.Batch, "deleted", p.Deleted) },
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
	fmt.Println("deleted", res.Deleted, "in", res.Batches, "batches;", left, "rows left")
	// Output:
	// batch 1 deleted 10000
	// batch 2 deleted 10000
	// batch 3 deleted 5000
	// deleted 25000 in 4 batches; 100 rows left
}
