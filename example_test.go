package inbox_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/effectively-once/watermill-inbox"
)

// A credit published twice with one event ID is applied once.
func ExampleMiddleware() {
	ctx := context.Background()
	db, err := sql.Open(testDriver(), testDSN())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	table := uniqueName("inbox_example")
	defer db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_migrations, ` + table + `_accounts`)
	if err := inbox.Migrate(ctx, db, inbox.WithTable(table)); err != nil {
		fmt.Println(err)
		return
	}
	db.Exec(`CREATE TABLE ` + table + `_accounts (id int PRIMARY KEY, balance bigint NOT NULL)`)
	db.Exec(`INSERT INTO ` + table + `_accounts VALUES (1, 0)`)

	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	router, _ := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	router.AddMiddleware(inbox.Middleware(db, inbox.WithTable(table)))
	router.AddConsumerHandler("wallet-credits", "deposits", pubsub, func(msg *message.Message) error {
		tx, _ := inbox.TxFromContext(msg.Context())
		_, err := tx.ExecContext(msg.Context(), `UPDATE `+table+`_accounts SET balance = balance + 100 WHERE id = 1`)
		return err
	})
	go router.Run(ctx)
	defer router.Close()
	<-router.Running()

	publisher := inbox.EventIDPublisher(pubsub, "")
	credit := message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1,"amount":100}`))
	publisher.Publish("deposits", credit)
	publisher.Publish("deposits", credit) // a retried publish: same message, same event ID

	var balance int
	db.QueryRow(`SELECT balance FROM ` + table + `_accounts WHERE id = 1`).Scan(&balance)
	fmt.Println("balance:", balance)
	// Output: balance: 100
}
