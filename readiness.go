package inbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/driver"
)

// ready holds back, for the reject delay, a message that the inbox cannot apply for reasons that are not the
// message's: its handler's name cannot be a consumer name, or the schema is missing (with WithAutoMigrate off), of
// another shape, or contradicts WithIDType. The message is fine, so it is nacked, never dead-lettered, and the
// delay keeps its redeliveries from spinning. Before the first message, and after a statement found the table
// gone, ready checks the schema, migrating it when allowed; otherwise it costs a few atomic loads.
func (i *Inbox) ready(msg *message.Message) error {
	ctx := msg.Context()
	err := i.checkHandlerName(msg)
	if err == nil {
		err = i.checkSubscriberTx(msg)
	}
	if err == nil {
		_, err = i.schemaReady(ctx)
	}
	if err == nil {
		return nil
	}
	return i.holdBack(msg, err)
}

// holdBack logs why the inbox cannot apply any message now and returns err after the reject delay, so that the
// message is nacked without spinning: for a schema or configuration fault, which no dead-letter topic should get.
func (i *Inbox) holdBack(msg *message.Message, err error) error {
	ctx := msg.Context()
	if ctx.Err() != nil {
		return err
	}
	i.cfg.logger.Error("Inbox cannot apply messages; nacking after the reject delay", err,
		watermill.LogFields{"message_uuid": msg.UUID, "table": i.cfg.table, "handler": message.HandlerNameFromCtx(ctx)})
	consumer := i.cfg.consumer
	if consumer == "" {
		consumer = message.HandlerNameFromCtx(ctx)
	}
	i.nacked(msg, consumer, holdBackReason(err), err)
	return sleepThen(ctx, i.cfg.rejectDelay, err)
}

// checkHandlerName refuses a handler's name that cannot scope the inbox when no WithConsumer replaces it: the
// database would refuse it in every claim, and the fault is the configuration's, whatever the message.
func (i *Inbox) checkHandlerName(msg *message.Message) error {
	if i.cfg.consumerSet {
		return nil // checked at construction
	}
	name := message.HandlerNameFromCtx(msg.Context())
	if name == "" {
		return nil // no router: reported as ErrNoConsumer with the message
	}
	if problem := textProblem(name, MaxConsumerLength); problem != "" {
		return fmt.Errorf("%w: handler name %s cannot be the consumer name: %s; rename the handler, or give WithConsumer",
			ErrInvalidOption, quoteShort(name), problem)
	}
	return nil
}

// readiness is what an Inbox knows of its schema. The first message checks it, and so does the first message after
// a statement found the table missing; the others read the outcome. No goroutine is involved.
type readiness struct {
	turn   chan struct{}               // one check at a time; a channel, so that a waiting message can give up
	last   atomic.Pointer[schemaCheck] // the outcome of the last check, nil before the first
	losses *atomic.Uint64              // the table's count of statements that found it missing
}

// schemaCheck is the outcome of one schema check.
type schemaCheck struct {
	idType IDType // message_id's type, when err is nil
	err    error
	losses uint64 // the table's loss count when the check began
}

func newReadiness(table string) readiness {
	return readiness{turn: make(chan struct{}, 1), losses: schemaLossCounter(table)}
}

// schemaLosses counts, per table name, the statements that found the table missing. An Inbox compares the count
// with the one its last check began at, so a table dropped while the process runs is checked again by the next
// message instead of failing every claim alike. The count is kept by name, not per Inbox, because the statements'
// error translation knows only the name; an Inbox over a table of the same name in another database then checks
// once more than it needed to, which is harmless. It holds one counter per table name the process uses.
var schemaLosses sync.Map // table name -> *atomic.Uint64

func schemaLossCounter(table string) *atomic.Uint64 {
	c, _ := schemaLosses.LoadOrStore(table, new(atomic.Uint64))
	return c.(*atomic.Uint64)
}

// noteSchemaLost tells every Inbox over table to check its schema again.
func noteSchemaLost(table string) { schemaLossCounter(table).Add(1) }

// schemaReady returns the type of the inbox table's message_id, checking the schema first unless a check passed
// since the table was last found missing.
func (i *Inbox) schemaReady(ctx context.Context) (IDType, error) {
	r := &i.readiness
	seen := r.last.Load()
	if seen != nil && seen.err == nil && seen.losses == r.losses.Load() {
		return seen.idType, nil
	}
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	defer func() { <-r.turn }()
	// A check that ended while this message waited for its turn answers for it too, so that messages arriving
	// together make one check, not one each.
	if cur := r.last.Load(); cur != seen && (cur.err != nil || cur.losses == r.losses.Load()) {
		return cur.idType, cur.err
	}
	losses := r.losses.Load()
	idType, err := i.checkSchema(ctx)
	if err != nil && ctx.Err() != nil {
		return "", err // this message ended, which says nothing about the schema: leave the next one to check
	}
	r.last.Store(&schemaCheck{idType: idType, err: err, losses: losses})
	return idType, err
}

// checkSchema compares the schema with the shape the inbox needs and returns message_id's type. A missing schema,
// or one that lacks only whole objects that a newer version added, is migrated when WithAutoMigrate allows it;
// anything else that differs is reported and left alone.
func (i *Inbox) checkSchema(ctx context.Context) (IDType, error) {
	if err := i.db.checkServer(ctx); err != nil {
		return "", err
	}
	report, err := i.inspectSchema(ctx)
	if err != nil {
		return "", err
	}
	if i.cfg.autoMigrate && (report.missing || report.outdated || report.incomplete()) {
		res, err := migrate(ctx, i.db, i.cfg)
		if err != nil {
			return "", err
		}
		if res.to > res.from {
			i.cfg.logger.Info("Inbox migrated its schema", watermill.LogFields{"table": i.cfg.table, "from_version": res.from, "to_version": res.to})
		}
		report = res.schema
	}
	if err := report.err(i.cfg.table); err != nil {
		return "", err
	}
	if i.cfg.idTypeSet && report.idType != i.cfg.idType {
		return "", fmt.Errorf("%w: WithIDType(%s), but table %s stores message_id as %s: drop the option, which only "+
			"chooses the type of a new table", ErrInvalidOption, i.cfg.idType, i.cfg.table, report.idType)
	}
	return report.idType, nil
}

// inspectSchema runs the schema check in a read-only transaction of its own, which keeps its statements on one
// server connection behind a pooler in transaction mode.
func (i *Inbox) inspectSchema(ctx context.Context) (schemaReport, error) {
	tx, err := i.db.pool.Begin(ctx, driver.TxOptions{ReadOnly: true})
	if err != nil {
		return schemaReport{}, fmt.Errorf("inbox: check the schema of %s: begin: %w", i.cfg.table, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // it only read: nothing to keep, and no failure worth reporting
	r, err := i.store.inspectSchema(ctx, tx)
	return fromDialectReport(r), err
}

// storedIDType returns the type of message_id as the last schema check found it, or, before any check passed, the
// configured one.
func (i *Inbox) storedIDType() IDType {
	if c := i.readiness.last.Load(); c != nil && c.err == nil {
		return c.idType
	}
	return i.cfg.idType
}
