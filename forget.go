package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// ForgetParams names the row Forget removes.
type ForgetParams struct {
	// Consumer is the consumer the message was applied for, as the inbox stores it (by default the handler's name).
	Consumer string
	// ID is the event ID, as the producer set it.
	ID string
	// Force removes a 'processing' row even while its lease is live. Without it such a row is kept and Forget
	// returns ErrLeaseHeld: its holder may be calling out right now, and the next copy would call again.
	Force bool
}

// ForgottenRow is the row Forget removed, as it was.
type ForgottenRow struct {
	// State is the row's state: "done", or in lease mode "failed", "released" or "processing".
	State string
	// ProcessedAt is the row's last state change, by the database clock.
	ProcessedAt time.Time
	// Attempts is how many times lease mode claimed the message; 0 in transaction mode.
	Attempts int
	// LastError is why lease mode's last attempt ended without "done", if it did.
	LastError string
	// HadProduced is true when the row kept messages the handler produced, which a redelivery would have sent
	// again and which a new run will produce anew.
	HadProduced bool
}

// Forget removes the inbox row of one message, so that its next copy is applied again: for a message whose effect
// was rolled back by hand, or a 'failed' lease-mode message to be retried after a fix. It logs what it removed.
// It returns ErrNotFound when there is no such row, and ErrLeaseHeld for a live lease unless p.Force is set.
// It reads WithTable and WithLogger.
func (d *Database) Forget(ctx context.Context, p ForgetParams, opts ...MaintenanceOption) (ForgottenRow, error) {
	if err := d.check("Forget: "); err != nil {
		return ForgottenRow{}, err
	}
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return ForgottenRow{}, err
	}
	if p.Consumer == "" || p.ID == "" {
		return ForgottenRow{}, fmt.Errorf("%w: Forget: the consumer and the ID must both be set", ErrInvalidOption)
	}
	f, err := d.ops(c.table).Forget(ctx, dialect.ForgetParams{Consumer: p.Consumer, ID: p.ID, Force: p.Force})
	if err != nil {
		return ForgottenRow{}, err
	}
	r := ForgottenRow{State: f.State, ProcessedAt: f.ProcessedAt, Attempts: f.Attempts, LastError: f.LastError, HadProduced: f.HadProduced}
	switch {
	case f.Deleted:
		c.logger.Info("Inbox row forgotten: the next copy of the message will be applied again", watermill.LogFields{
			"table": c.table, "consumer": p.Consumer, "event_id": p.ID, "state": r.State,
			"processed_at": r.ProcessedAt, "attempts": r.Attempts, "last_error": r.LastError, "had_produced": r.HadProduced,
		})
		return r, nil
	case !f.Held:
		return r, fmt.Errorf("inbox: forget %s/%s: %w", p.Consumer, p.ID, ErrNotFound)
	}
	return r, fmt.Errorf("inbox: forget %s/%s: %w for another %s; wait for it to end, or force", p.Consumer, p.ID,
		ErrLeaseHeld, f.Remaining.Round(time.Second))
}
