package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
)

// recordNotification is the notifications service's handler: one notification per credited event, written on the
// inbox transaction so the notification and the row that marks the event as seen commit together. A copy the relay
// sent again never reaches it; the inbox skips it.
func recordNotification(msg *message.Message) error {
	ctx := msg.Context()
	tx, ok := inbox.TxFromContext(ctx)
	if !ok {
		return errors.New("notifications: no inbox transaction; is inbox.Middleware installed?")
	}
	eventID, _ := inbox.EventIDFromContext(ctx)

	var c credited
	if err := json.Unmarshal(msg.Payload, &c); err != nil {
		return fmt.Errorf("notifications: decode credited event %s: %w", eventID, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO `+notificationsTable+` (event_id, account_id, amount, balance) VALUES ($1, $2, $3, $4)`,
		eventID, c.AccountID, c.Amount, c.Balance); err != nil {
		return fmt.Errorf("notifications: record notification: %w", err)
	}
	return nil
}
