package inbox_test

import (
	"context"
	"database/sql"
	"fmt"

	inbox "github.com/effectively-once/watermill-inbox"
)

// An inbox with 25,000 rows older than the retention and 100 recent ones is cleaned in bounded batches; the
// recent rows stay.
func ExampleCleanup() {
	ctx := context.Background()
	db, err := sql.Open(testDriver(), testDSN())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	table := uniqueName("inbox_example")
	defer db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_migrations`)
	if err := inbox.Migrate(ctx, db, inbox.WithTable(table)); err != nil {
		fmt.Println(err)
		return
	}
	// A month of history, as if the table had never been cleaned.
	db.Exec(`INSERT INTO ` + table + ` (consumer, message_id, processed_at)
		SELECT 'wallet-credits', 'evt-' || g, now() - interval '30 days' + g * interval '1 second'
		FROM generate_series(1, 25000) g`)
	db.Exec(`INSERT INTO ` + table + ` (consumer, message_id)
		SELECT 'wallet-credits', 'new-' || g FROM generate_series(1, 100) g`)

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
	db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&left)
	fmt.Println("deleted", res.Deleted, "in", res.Batches, "batches;", left, "rows left")
	// Output:
	// batch 1 deleted 10000
	// batch 2 deleted 10000
	// batch 3 deleted 5000
	// deleted 25000 in 4 batches; 100 rows left
}
