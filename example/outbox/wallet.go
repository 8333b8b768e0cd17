package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
)

// deposit is the event on the deposits topic: add Amount to the balance of AccountID.
type deposit struct {
	AccountID int64 `json:"account_id"`
	Amount    int64 `json:"amount"`
}

// credited is the event the wallet service announces once a deposit is on the balance.
type credited struct {
	DepositID string `json:"deposit_id"`
	AccountID int64  `json:"account_id"`
	Amount    int64  `json:"amount"`
	Balance   int64  `json:"balance"` // after this credit
}

// publishDeposits publishes cfg.Events deposits spread over the accounts, then cfg.Resends of them again with their
// original message UUID, as a producer's outbox relay does after a restart. It returns the sum of the unique
// deposits per account. The amounts differ, so a credit applied twice shows up in a balance.
func publishDeposits(pub message.Publisher, topic string, cfg config) (expected map[int64]int64, err error) {
	ids := make([]string, cfg.Events)
	deposits := make([]deposit, cfg.Events)
	expected = make(map[int64]int64, cfg.Accounts)
	for i := range deposits {
		ids[i] = watermill.NewUUID()
		deposits[i] = deposit{AccountID: int64(i%cfg.Accounts + 1), Amount: int64(10 * (i + 1))}
		expected[deposits[i].AccountID] += deposits[i].Amount
	}
	publish := func(i int) error {
		payload, err := json.Marshal(deposits[i])
		if err != nil {
			return err
		}
		// EventIDPublisher copies the UUID into event_id; to Kafka a resend is a new record at a new offset.
		if err := pub.Publish(topic, message.NewMessage(ids[i], payload)); err != nil {
			return fmt.Errorf("publish deposit %s: %w", ids[i], err)
		}
		return nil
	}
	for i := range deposits {
		if err := publish(i); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Resends {
		if err := publish(i * cfg.Events / cfg.Resends); err != nil {
			return nil, err
		}
	}
	return expected, nil
}

// wallet is the wallet service's handler, with the topic it announces credits on.
type wallet struct {
	creditedTopic string
}

// creditAccount credits one deposit and writes its credited event to the outbox. All three statements (the
// balance, the ledger line, the outbox row) run on the inbox transaction, with the inbox row that marks the deposit
// as done: they commit together or not at all. So a deposit skipped as a duplicate writes no second event, and a
// credit that commits always has its event waiting, whatever happens to this process before the relay runs.
func (w wallet) creditAccount(msg *message.Message) error {
	ctx := msg.Context()
	tx, ok := inbox.TxFromContext(ctx)
	if !ok {
		return errors.New("wallet-credits: no inbox transaction; is inbox.Middleware installed?")
	}
	eventID, _ := inbox.EventIDFromContext(ctx)

	var d deposit
	if err := json.Unmarshal(msg.Payload, &d); err != nil {
		return fmt.Errorf("wallet-credits: decode deposit %s: %w", eventID, err)
	}
	c := credited{DepositID: eventID, AccountID: d.AccountID, Amount: d.Amount}
	if err := tx.QueryRowContext(ctx,
		`UPDATE `+accountsTable+` SET balance = balance + $1 WHERE id = $2 RETURNING balance`,
		d.Amount, d.AccountID).Scan(&c.Balance); err != nil {
		return fmt.Errorf("wallet-credits: credit account %d: %w", d.AccountID, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO `+ledgerTable+` (event_id, account_id, amount) VALUES ($1, $2, $3)`,
		eventID, d.AccountID, d.Amount); err != nil {
		return fmt.Errorf("wallet-credits: record ledger line: %w", err)
	}

	payload, err := json.Marshal(c)
	if err != nil {
		return err
	}
	// A fresh UUID is safe here, unlike in a producer that retries its publish: this row is written once, in the
	// transaction that applies the deposit once. EventIDPublisher stamps it into event_id before the forwarder
	// seals the message in its envelope, so every copy the relay ever sends carries the same ID.
	outbox, err := outboxPublisher(tx)
	if err != nil {
		return err
	}
	if err := outbox.Publish(w.creditedTopic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
		return fmt.Errorf("wallet-credits: write credited event to the outbox: %w", err)
	}
	return nil
}
