package main

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

// credit is the event on the deposits topic: add Amount to the balance of AccountID.
type credit struct {
	AccountID int64 `json:"account_id"`
	Amount    int64 `json:"amount"`
}

// event is one credit with the ID its producer gave it.
type event struct {
	ID string
	credit
}

// planCredits spreads n credits over the accounts with amounts that differ, so a credit applied twice shows up.
func planCredits(accounts, n int) []event {
	events := make([]event, n)
	for i := range events {
		events[i] = event{
			ID:     watermill.NewUUID(),
			credit: credit{AccountID: int64(i%accounts + 1), Amount: int64(10 * (i + 1))},
		}
	}
	return events
}

// publishCredit sends e as a new message whose UUID is e's ID, which EventIDPublisher copies into event_id.
func publishCredit(pub message.Publisher, topic string, e event) error {
	payload, err := json.Marshal(e.credit)
	if err != nil {
		return err
	}
	if err := pub.Publish(topic, message.NewMessage(e.ID, payload)); err != nil {
		return fmt.Errorf("publish credit %s: %w", e.ID, err)
	}
	return nil
}
