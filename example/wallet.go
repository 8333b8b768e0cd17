package main

import (
	"context"
	"database/sql"
	"fmt"

	inbox "github.com/effectively-once/watermill-inbox"
)

// inboxTable keeps the example's inbox apart from the default table, so a rerun can empty it without touching the
// history of any other consumer in the same database.
const inboxTable = "example_inbox"

// The ledger has no unique key on event_id on purpose: if the inbox let a duplicate through, the demo must show a
// wrong balance rather than have the ledger quietly reject the second line.
const resetSchema = `
DROP TABLE IF EXISTS example_ledger, example_accounts;
CREATE TABLE example_accounts (
	id      bigint PRIMARY KEY,
	balance bigint NOT NULL DEFAULT 0
);
CREATE TABLE example_ledger (
	event_id   text   NOT NULL,
	account_id bigint NOT NULL REFERENCES example_accounts (id),
	amount     bigint NOT NULL
);`

// resetDatabase gives every run zero balances, an empty ledger and an empty inbox.
func resetDatabase(ctx context.Context, db *sql.DB, accounts int) error {
	// Without parameters lib/pq uses the simple query protocol, which accepts several statements at once.
	if _, err := db.ExecContext(ctx, resetSchema); err != nil {
		return fmt.Errorf("create wallet tables: %w", err)
	}
	if _, err := db.ExecContext(ctx,
		`INSERT INTO example_accounts (id) SELECT generate_series(1, $1::bigint)`, accounts); err != nil {
		return fmt.Errorf("open accounts: %w", err)
	}
	if err := inbox.OnSQL(db).Migrate(ctx, inbox.WithTable(inboxTable)); err != nil {
		return fmt.Errorf("migrate inbox: %w", err)
	}
	if _, err := db.ExecContext(ctx, `TRUNCATE `+inboxTable+` CASCADE`); err != nil {
		return fmt.Errorf("empty inbox: %w", err)
	}
	return nil
}

// ledgerLines counts the credits that have reached a balance.
func ledgerLines(ctx context.Context, db *sql.DB) (n int, err error) {
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM example_ledger`).Scan(&n)
	return n, err
}

// balances reads every account's balance by account ID.
func balances(ctx context.Context, db *sql.DB) (map[int64]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, balance FROM example_accounts`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	b := make(map[int64]int64)
	for rows.Next() {
		var id, balance int64
		if err := rows.Scan(&id, &balance); err != nil {
			return nil, err
		}
		b[id] = balance
	}
	return b, rows.Err()
}
