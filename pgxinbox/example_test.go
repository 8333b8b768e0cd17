package pgxinbox_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// TestMain leaves the Examples out under -short: like the tests that skip there, they need PostgreSQL.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		skip := flag.Lookup("test.skip")
		pattern := "^Example"
		if cur := skip.Value.String(); cur != "" {
			pattern = cur + "|" + pattern
		}
		if err := skip.Value.Set(pattern); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
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
	table := uniqueName("inbox_example")
	defer func() {
		for _, q := range []string{
			`DROP TABLE IF EXISTS ` + table + `_accounts, ` + table + `_produced, ` + table + `_locks, ` + table + `_migrations, ` +
				table + `_consumers, ` + table + ` CASCADE`,
			`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`,
		} {
			if _, err := pool.Exec(ctx, q); err != nil {
				fmt.Println(err)
			}
		}
	}()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+`_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO `+table+`_accounts VALUES (1, 0)`); err != nil {
		fmt.Println(err)
		return
	}

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
