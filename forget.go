package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// ErrNotFound reports that the inbox has no row for a consumer and event ID: the message was never applied, or
// its row was cleaned up.
var ErrNotFound = errors.New("inbox: no such inbox row")

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
	pool := d.pool
	c, err := newMaintenanceConfig(opts)
	if err != nil {
		return ForgottenRow{}, err
	}
	if p.Consumer == "" || p.ID == "" {
		return ForgottenRow{}, fmt.Errorf("%w: Forget: the consumer and the ID must both be set", ErrInvalidOption)
	}
	s := newOpsStore(d.dialect, c.table)
	var f dialect.Forgotten
	// Both statements in one short transaction: behind a transaction-pooling proxy each statement must be in one.
	err = store.InShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		f, err = s.d.Forget(ctx, tx, dialect.ForgetParams{Table: c.table, Consumer: p.Consumer, ID: p.ID, Force: p.Force})
		return err
	})
	r := ForgottenRow{State: f.State, ProcessedAt: f.ProcessedAt, Attempts: f.Attempts, LastError: f.LastError, HadProduced: f.HadProduced}
	deleted, leftover := f.Deleted, f.Held
	switch {
	case s.d.Classify(err) == dialect.IDRefused: // not a UUID, in a uuid column: no row can have it
		return ForgottenRow{}, fmt.Errorf("inbox: forget %s/%s: %w (the table stores UUIDs)", p.Consumer, p.ID, ErrNotFound)
	case err != nil:
		return ForgottenRow{}, s.wrap("forget "+p.Consumer+"/"+p.ID+" in", err)
	case deleted:
		c.logger.Info("Inbox row forgotten: the next copy of the message will be applied again", watermill.LogFields{
			"table": c.table, "consumer": p.Consumer, "event_id": p.ID, "state": r.State,
			"processed_at": r.ProcessedAt, "attempts": r.Attempts, "last_error": r.LastError, "had_produced": r.HadProduced,
		})
		return r, nil
	case !leftover:
		return r, fmt.Errorf("inbox: forget %s/%s: %w", p.Consumer, p.ID, ErrNotFound)
	}
	return r, fmt.Errorf("inbox: forget %s/%s: %w for another %s; wait for it to end, or force", p.Consumer, p.ID,
		ErrLeaseHeld, f.Remaining.Round(time.Second))
}
