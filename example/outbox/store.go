package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"

	inbox "github.com/effectively-once/watermill-inbox"
)

// Every table the example owns starts with example_outbox_, so a rerun can drop them all without touching the
// history of any other consumer, example or test in the same database.
const (
	accountsTable      = "example_outbox_accounts"
	ledgerTable        = "example_outbox_ledger"
	notificationsTable = "example_outbox_notifications"
	walletInboxTable   = "example_outbox_wallet_inbox"
	notifyInboxTable   = "example_outbox_notify_inbox"
)

// Neither the ledger nor the notifications have a unique key on event_id, on purpose: if an inbox let a duplicate
// through, the demo must count two lines rather than have the table quietly reject the second.
const resetSchema = `
DROP TABLE IF EXISTS example_outbox_notifications, example_outbox_ledger, example_outbox_accounts;
CREATE TABLE example_outbox_accounts (
	id      bigint PRIMARY KEY,
	balance bigint NOT NULL DEFAULT 0
);
CREATE TABLE example_outbox_ledger (
	event_id   text   NOT NULL,
	account_id bigint NOT NULL REFERENCES example_outbox_accounts (id),
	amount     bigint NOT NULL
);
CREATE TABLE example_outbox_notifications (
	event_id   text   NOT NULL,
	account_id bigint NOT NULL,
	amount     bigint NOT NULL,
	balance    bigint NOT NULL
);`

// resetDatabase gives every run zero balances, empty ledger, outbox, notifications and inboxes.
func resetDatabase(ctx context.Context, db *sql.DB, accounts int, logger watermill.LoggerAdapter) error {
	// Without parameters lib/pq uses the simple query protocol, which accepts several statements at once.
	if _, err := db.ExecContext(ctx, resetSchema); err != nil {
		return fmt.Errorf("create example tables: %w", err)
	}
	if _, err := db.ExecContext(ctx,
		`INSERT INTO `+accountsTable+` (id) SELECT generate_series(1, $1::bigint)`, accounts); err != nil {
		return fmt.Errorf("open accounts: %w", err)
	}
	for _, table := range []string{walletInboxTable, notifyInboxTable} {
		if err := inbox.OnSQL(db).Migrate(ctx, inbox.WithTable(table)); err != nil {
			return fmt.Errorf("migrate inbox %s: %w", table, err)
		}
		if _, err := db.ExecContext(ctx, `TRUNCATE `+table+` CASCADE`); err != nil {
			return fmt.Errorf("empty inbox %s: %w", table, err)
		}
	}
	// An event left in the outbox by an earlier run names that run's Kafka topic; the relay must not send it there.
	if _, err := db.ExecContext(ctx, `DROP TABLE IF EXISTS `+outboxTable); err != nil {
		return fmt.Errorf("drop outbox tables: %w", err)
	}
	// The wallet handler writes the outbox through watermill-sql's publisher on the inbox transaction, and a
	// publisher on a transaction cannot create tables: the relay's subscriber creates them now, before any credit.
	sub, err := newOutboxSubscriber(db, logger)
	if err != nil {
		return err
	}
	if err := sub.SubscribeInitialize(outboxTopic); err != nil {
		return fmt.Errorf("create outbox tables: %w", err)
	}
	return sub.Close()
}

// count returns the number of rows in one of the example's tables.
func count(ctx context.Context, db *sql.DB, table string) (n int, err error) {
	err = db.QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n)
	return n, err
}

// notifications returns how many notifications were recorded and for how many distinct events.
func notifications(ctx context.Context, db *sql.DB) (rows, events int, err error) {
	err = db.QueryRowContext(ctx,
		`SELECT count(*), count(DISTINCT event_id) FROM `+notificationsTable).Scan(&rows, &events)
	return rows, events, err
}

// balances reads every account's balance by account ID.
func balances(ctx context.Context, db *sql.DB) (map[int64]int64, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, balance FROM `+accountsTable)
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
