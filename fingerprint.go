package inbox

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/fingerprint"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/observe"
)

// fingerprintOf returns msg's fingerprint, or nil without WithFingerprint.
func (i *core) fingerprintOf(msg *message.Message) []byte {
	if i.cfg.fingerprint == nil {
		return nil
	}
	return fingerprint.Of(msg.Payload, msg.Metadata.Get, i.cfg.fingerprint.MetadataKeys)
}

// checkCopy compares a copy of an applied message with the fingerprint stored with its row, which read returns,
// and, when they differ, reports the conflict and returns the error that ends the copy: an unusable one, which
// settle dead-letters, when the options say so; nil when the copy is skipped, as a copy is.
func (i *core) checkCopy(msg *message.Message, consumer, id string, mode observe.Mode, read func() ([]byte, error)) error {
	theirs := i.fingerprintOf(msg)
	if theirs == nil {
		return nil
	}
	stored, err := read()
	if err != nil {
		return fmt.Errorf("inbox: read the fingerprint of %s/%s: %w", consumer, id, err)
	}
	if !fingerprint.Conflicts(stored, theirs) {
		return nil
	}
	e := observe.ConflictEvent{Consumer: consumer, EventID: id, Mode: mode, Message: msg, Stored: fingerprint.String(stored),
		Received: fingerprint.String(theirs), DeadLettered: i.cfg.fingerprint.DeadLetter}
	cause := fmt.Errorf("%w: %s/%s was applied for a message with fingerprint %s, and this one has %s", ErrFingerprintConflict,
		consumer, id, e.Stored, e.Received)
	i.cfg.logger.Error("Inbox found an event ID reused for another message", cause, logFields(msg, consumer, id).Add(
		watermill.LogFields{"stored_fingerprint": e.Stored, "received_fingerprint": e.Received, "dead_lettered": e.DeadLettered}))
	i.cfg.observer.FingerprintConflict(msg.Context(), e)
	if e.DeadLettered {
		return unusable{cause}
	}
	return nil
}

// committedFingerprint returns a read of the fingerprint stored with the row of (consumer, id) in a short
// transaction of its own, for a copy that has no transaction of the inbox's to read it in.
func (i *core) committedFingerprint(ctx context.Context, consumer, id string) func() ([]byte, error) {
	return func() (f []byte, err error) {
		err = store.InShortTx(ctx, i.db.pool, i.store.Dialect(), func(tx driver.Tx) error {
			f, err = i.store.ReadFingerprint(ctx, tx, consumer, id)
			return err
		})
		return f, err
	}
}

// addFingerprint adds the fingerprint column to the table c names, in Migrate's transaction q, and checks it into r.
func addFingerprint(ctx context.Context, d dialect.Dialect, q driver.Executor, c config, r *dialect.SchemaReport) error {
	fp, ok := d.(dialect.Fingerprinter)
	if !ok {
		return fmt.Errorf("%w: WithFingerprint: the %s inbox cannot store fingerprints", ErrInvalidOption, d.Name())
	}
	if err := fp.AddFingerprint(ctx, q, c.table); err != nil {
		return fmt.Errorf("add the fingerprint column to %s: %w", c.table, err)
	}
	return inspectFingerprint(ctx, d, q, c, r)
}

// inspectFingerprint adds to r what WithFingerprint needs of the table and it lacks: the fingerprint column, of
// its type. A missing column is a whole object that Migrate adds, so the middleware adds it unless
// WithAutoMigrate(false).
func inspectFingerprint(ctx context.Context, d dialect.Dialect, q driver.Executor, c config, r *dialect.SchemaReport) error {
	fp, ok := d.(dialect.Fingerprinter)
	if c.fingerprint == nil || !ok || r.Missing {
		return nil
	}
	present, problem, err := fp.FingerprintColumn(ctx, q, c.table)
	switch {
	case err != nil:
		return fmt.Errorf("inbox: check the fingerprint column of %s: %w", c.table, err)
	case !present:
		r.Absent = append(r.Absent, "table "+c.table+": column fingerprint does not exist, and WithFingerprint needs it: run Migrate with WithFingerprint")
	case problem != "":
		r.Wrong = append(r.Wrong, problem)
	}
	return nil
}

// takenOverByAnother reports, for a copy that would take over a row left unfinished (a lease released or run
// out, a row lease mode left), whether the row carries the fingerprint of another message, which read returns.
// Such a copy is a reused event ID as the copy of a finished row is: reported, then skipped, or dead-lettered with
// the unusable error returned, and its handler never runs; the row stays for its own message's copies.
func (i *core) takenOverByAnother(msg *message.Message, consumer, id string, ob *observed, read func() ([]byte, error)) (bool, error) {
	theirs := i.fingerprintOf(msg)
	if theirs == nil {
		return false, nil
	}
	stored, err := read()
	if err != nil {
		return true, fmt.Errorf("inbox: read the fingerprint of %s/%s: %w", consumer, id, err)
	}
	if !fingerprint.Conflicts(stored, theirs) {
		return false, nil
	}
	if err := i.checkCopy(msg, consumer, id, ob.mode, func() ([]byte, error) { return stored, nil }); err != nil {
		return true, err
	}
	i.cfg.logger.Info("skipped a message whose event ID another message's unfinished row holds", logFields(msg, consumer, id))
	ob.skipped()
	return true, nil
}
