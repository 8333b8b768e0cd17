package pgxinbox_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// TestMain leaves the Examples out under -short: like the tests that skip there, they need PostgreSQL. Without
// -short it runs the tests in a database of their own, dropped at the end.
func TestMain(m *testing.M) {
	inboxtest.LeaveOutExamplesWhenShort()
	os.Exit(inboxtest.RunInOwnDatabases(m, inboxtest.PrivatePostgresDatabase("postgres")))
}

// The inbox over a pgx v5 pool: the handler's side effect runs on the pgx.Tx that holds the message's inbox row,
// and a redelivered copy is skipped.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testDSN())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	table, drop, err := exampleAccounts(ctx, pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	ib, err := pgxinbox.New(pool, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"))
	if err != nil {
		fmt.Println(err)
		return
	}
	applied := 0
	credit := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := pgxinbox.TxFromContext(msg.Context()) // a pgx.Tx
		_, err := tx.Exec(msg.Context(), `UPDATE `+table+`_accounts SET balance = balance + 100 WHERE id = 1`)
		applied++
		return nil, err
	})
	for range 2 { // the same event, delivered twice
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"amount":100}`))
		msg.Metadata.Set(inbox.DefaultIDMetadataKey, "evt-1")
		msg.SetContext(ctx)
		if _, err := credit(msg); err != nil {
			fmt.Println(err)
			return
		}
	}
	var balance int
	if err := pool.QueryRow(ctx, `SELECT balance FROM `+table+`_accounts WHERE id = 1`).Scan(&balance); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("applied %d of 2 deliveries; balance %d\n", applied, balance)
	// Output: applied 1 of 2 deliveries; balance 100
}

// With the claim at commit a message costs two round trips: BEGIN goes with the handler's statement, and the
// claim with COMMIT. The handler runs before the inbox knows whether the message is a copy, so every effect it has
// must be on the transaction: a copy's run is rolled back when its claim finds the row, and the copy is skipped.
func ExampleNew_claimAtCommit() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testDSN())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	table, drop, err := exampleAccounts(ctx, pool)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	ib, err := pgxinbox.New(pool, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"), inbox.WithClaimAtCommit())
	if err != nil {
		fmt.Println(err)
		return
	}
	runs := 0
	credit := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, _ := pgxinbox.TxFromContext(msg.Context())
		_, err := tx.Exec(msg.Context(), `UPDATE `+table+`_accounts SET balance = balance + 100 WHERE id = 1`)
		runs++
		return nil, err
	})
	for range 2 { // the same event, delivered twice
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"amount":100}`))
		msg.Metadata.Set(inbox.DefaultIDMetadataKey, "evt-1")
		msg.SetContext(ctx)
		if _, err := credit(msg); err != nil {
			fmt.Println(err)
			return
		}
	}
	var balance int
	if err := pool.QueryRow(ctx, `SELECT balance FROM `+table+`_accounts WHERE id = 1`).Scan(&balance); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("the handler ran %d times for 2 deliveries; balance %d\n", runs, balance)
	// Output: the handler ran 2 times for 2 deliveries; balance 100
}

// exampleAccounts creates an accounts table, account 1 at balance 0, under a fresh name for an inbox table, and
// returns that name and what drops every table of the example.
func exampleAccounts(ctx context.Context, pool *pgxpool.Pool) (table string, drop func(), err error) {
	table = inboxtest.UniqueName("inbox_example")
	drop = func() {
		for _, q := range []string{
			`DROP TABLE IF EXISTS ` + table + `_accounts, ` + table + `_produced, ` + table + `_locks, ` + table + `_migrations, ` +
				table + `_consumers, ` + table + ` CASCADE`,
			`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`,
		} {
			if _, err := pool.Exec(ctx, q); err != nil {
				fmt.Println(err)
			}
		}
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+`_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO `+table+`_accounts VALUES (1, 0)`); err != nil {
		drop()
		return "", nil, err
	}
	return table, drop, nil
}
