package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	inbox "github.com/effectively-once/watermill-inbox"
)

// A credit published twice with one event ID is applied once.
func ExampleMiddleware() {
	db, table, drop, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if _, err := db.Exec(`CREATE TABLE ` + table + `_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO ` + table + `_accounts VALUES (1, 0)`); err != nil {
		fmt.Println(err)
		return
	}

	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer func() {
		if err := pubsub.Close(); err != nil {
			fmt.Println(err)
		}
	}()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		fmt.Println(err)
		return
	}
	router.AddMiddleware(inbox.Middleware(db, inbox.WithTable(table))) // creates its tables on the first message
	router.AddConsumerHandler("wallet-credits", "deposits", pubsub, func(msg *message.Message) error {
		tx, ok := inbox.TxFromContext(msg.Context())
		if !ok {
			return errors.New("no inbox transaction")
		}
		_, err := tx.ExecContext(msg.Context(), `UPDATE `+table+`_accounts SET balance = balance + 100 WHERE id = 1`)
		return err
	})
	stopped := make(chan error, 1)
	go func() { stopped <- router.Run(context.Background()) }()
	<-router.Running()

	publisher := inbox.EventIDPublisher(pubsub, "")
	credit := message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1,"amount":100}`))
	for range 2 { // a retried publish: same message, same event ID
		if err := publisher.Publish("deposits", credit); err != nil {
			fmt.Println(err)
		}
	}
	if err := router.Close(); err != nil {
		fmt.Println(err)
	}
	if err := <-stopped; err != nil {
		fmt.Println(err)
	}

	var balance int
	if err := db.QueryRow(`SELECT balance FROM ` + table + `_accounts WHERE id = 1`).Scan(&balance); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("balance:", balance)
	// Output: balance: 100
}

// New builds an Inbox, checking its options; its middleware applies a redelivered credit once. Called outside a
// router, as here, it needs WithConsumer to scope its rows.
func ExampleNew() {
	db, table, drop, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()
	if _, err := db.Exec(`CREATE TABLE ` + table + `_accounts (id int PRIMARY KEY, balance bigint NOT NULL);
		INSERT INTO ` + table + `_accounts VALUES (1, 0)`); err != nil {
		fmt.Println(err)
		return
	}

	if _, err := inbox.New(db, inbox.WithTable("Wallet Inbox")); errors.Is(err, inbox.ErrInvalidOption) {
		fmt.Println("refused:", err)
	}
	ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("wallet-credits"))
	if err != nil {
		fmt.Println(err)
		return
	}
	var applied atomic.Int64
	credit := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		tx, ok := inbox.TxFromContext(msg.Context())
		if !ok {
			return nil, errors.New("no inbox transaction")
		}
		applied.Add(1)
		_, err := tx.ExecContext(msg.Context(), `UPDATE `+table+`_accounts SET balance = balance + 100 WHERE id = 1`)
		return nil, err
	})

	deliveries := 0
	for range 2 { // a delivery and the broker's redelivery: new Watermill UUIDs, one event ID
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1,"amount":100}`))
		msg.Metadata.Set(inbox.DefaultIDMetadataKey, "deposit-42")
		if _, err := credit(msg); err != nil {
			fmt.Println(err)
			return
		}
		deliveries++
	}

	var balance int
	if err := db.QueryRow(`SELECT balance FROM ` + table + `_accounts WHERE id = 1`).Scan(&balance); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d deliveries acked, applied %d, skipped %d duplicate; balance %d\n",
		deliveries, applied.Load(), int64(deliveries)-applied.Load(), balance)
	// Output:
	// refused: inbox: invalid option: WithTable("Wallet Inbox"): want a lower-case identifier matching ^[a-z_][a-z0-9_]{0,47}$
	// 2 deliveries acked, applied 1, skipped 1 duplicate; balance 100
}

// In lease mode the handler calls a provider outside the database with an idempotency key. The first attempt
// charges but loses the reply; the redelivery's attempt sends the same key and gets that charge back instead of a
// second one; a later copy is skipped.
func ExampleWithLease() {
	db, table, drop, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	charges := map[string]string{} // the provider: idempotency key -> charge ID
	charge := func(key string) string {
		if id, ok := charges[key]; ok {
			return id
		}
		charges[key] = fmt.Sprintf("ch_%d", len(charges)+1)
		return charges[key]
	}

	ib, err := inbox.New(db, inbox.WithTable(table), inbox.WithConsumer("payments"), inbox.WithLease(30*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	pay := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		lease, ok := inbox.LeaseFromContext(msg.Context())
		if !ok {
			return nil, errors.New("no lease")
		}
		id := charge(lease.IdempotencyKey())
		if lease.Attempt() == 1 {
			fmt.Println("attempt 1: charged", id, "but the reply was lost")
			return nil, errors.New("provider: timeout")
		}
		fmt.Printf("attempt %d: the same key returns %s (previous error: %s)\n", lease.Attempt(), id, lease.PreviousError())
		return nil, nil
	})

	for delivery := 1; delivery <= 3; delivery++ {
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"order":7,"amount":2500}`))
		msg.Metadata.Set(inbox.DefaultIDMetadataKey, "order-7-payment")
		if _, err := pay(msg); err != nil {
			fmt.Printf("delivery %d nacked: %v\n", delivery, err)
			continue
		}
		fmt.Printf("delivery %d acked\n", delivery)
	}
	fmt.Println("charges at the provider:", len(charges))
	// Output:
	// attempt 1: charged ch_1 but the reply was lost
	// delivery 1 nacked: provider: timeout
	// attempt 2: the same key returns ch_1 (previous error: provider: timeout)
	// delivery 2 acked
	// delivery 3 acked
	// charges at the provider: 1
}

// EventIDPublisher gives a message without an event ID its UUID as one, and keeps an ID the producer set: a
// retried publish of the same message, and a resend of a producer's event under a new UUID, are each applied once
// by the consumer's inbox.
func ExampleEventIDPublisher() {
	db, table, drop, err := exampleDB()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer drop()

	pubsub := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer func() {
		if err := pubsub.Close(); err != nil {
			fmt.Println(err)
		}
	}()
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		fmt.Println(err)
		return
	}
	router.AddMiddleware(inbox.Middleware(db, inbox.WithTable(table)))
	var handled []string // read after the router closed
	router.AddConsumerHandler("notifier", "orders", pubsub, func(msg *message.Message) error {
		handled = append(handled, string(msg.Payload))
		return nil
	})
	stopped := make(chan error, 1)
	go func() { stopped <- router.Run(context.Background()) }()
	<-router.Running()

	publisher := inbox.EventIDPublisher(pubsub, "")
	shipped := message.NewMessage(watermill.NewUUID(), []byte("order 7 shipped"))
	paid := func() *message.Message { // the producer's own ID, on a new message every time it is sent
		m := message.NewMessage(watermill.NewUUID(), []byte("order 7 paid"))
		m.Metadata.Set(inbox.DefaultIDMetadataKey, "order-7-paid")
		return m
	}
	for _, msg := range []*message.Message{shipped, shipped, paid(), paid()} {
		if err := publisher.Publish("orders", msg); err != nil {
			fmt.Println(err)
		}
	}
	if err := router.Close(); err != nil {
		fmt.Println(err)
	}
	if err := <-stopped; err != nil {
		fmt.Println(err)
	}

	fmt.Println("stamped with its UUID:", shipped.Metadata.Get(inbox.DefaultIDMetadataKey) == shipped.UUID)
	fmt.Printf("4 publishes, handled %d: %q\n", len(handled), handled)
	// Output:
	// stamped with its UUID: true
	// 4 publishes, handled 2: ["order 7 shipped" "order 7 paid"]
}
