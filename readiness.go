package inbox

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/text"
)

// ready holds back, for the reject delay, a message that the inbox cannot apply for reasons that are not the
// message's: its handler's name cannot be a consumer name, or the schema is missing (with WithAutoMigrate off), of
// another shape, or contradicts WithIDType. The message is fine, so it is nacked, never dead-lettered, and the
// delay keeps its redeliveries from spinning. Before the first message, and after a statement found the table
// gone, ready checks the schema, migrating it when allowed; otherwise it costs a few atomic loads.
func (i *core) ready(msg *message.Message) error {
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
func (i *core) holdBack(msg *message.Message, err error) error {
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
func (i *core) checkHandlerName(msg *message.Message) error {
	if i.cfg.consumerSet {
		return nil // checked at construction
	}
	name := message.HandlerNameFromCtx(msg.Context())
	if name == "" {
		return nil // no router: reported as ErrNoConsumer with the message
	}
	if problem := text.Problem(name, MaxConsumerLength); problem != "" {
		return fmt.Errorf("%w: handler name %s cannot be the consumer name: %s; rename the handler, or give WithConsumer",
			ErrInvalidOption, text.Quote(name), problem)
	}
	return nil
}

// schemaReady returns the type of the inbox table's message_id, checking the schema first unless a check passed
// since the table was last found missing (internal/readiness).
func (i *core) schemaReady(ctx context.Context) (IDType, error) {
	return i.readiness.Ready(ctx, i.checkSchema)
}

// checkSchema compares the schema with the shape the inbox needs and returns message_id's type. A missing schema,
// or one that lacks only whole objects that a newer version added, is migrated when WithAutoMigrate allows it;
// anything else that differs is reported and left alone.
func (i *core) checkSchema(ctx context.Context) (IDType, error) {
	if err := i.db.checkServer(ctx); err != nil {
		return "", err
	}
	report, err := i.inspectSchema(ctx)
	if err != nil {
		return "", err
	}
	if i.cfg.autoMigrate && (report.Missing || report.Outdated || report.Incomplete()) {
		res, err := migrate(ctx, i.db, i.cfg)
		if err != nil {
			return "", err
		}
		if res.to > res.from {
			i.cfg.logger.Info("Inbox migrated its schema", watermill.LogFields{"table": i.cfg.table, "from_version": res.from, "to_version": res.to})
		}
		report = res.schema
	}
	if err := schemaErr(report, i.cfg.table); err != nil {
		return "", err
	}
	if idType := IDType(report.IDType); i.cfg.idTypeSet && idType != i.cfg.idType {
		return "", fmt.Errorf("%w: WithIDType(%s), but table %s stores message_id as %s: drop the option, which only "+
			"chooses the type of a new table", ErrInvalidOption, i.cfg.idType, i.cfg.table, idType)
	}
	return IDType(report.IDType), nil
}

// inspectSchema runs the schema check in a read-only transaction of its own, which keeps its statements on one
// server connection behind a pooler in transaction mode.
func (i *core) inspectSchema(ctx context.Context) (dialect.SchemaReport, error) {
	tx, err := i.db.pool.Begin(ctx, driver.TxOptions{ReadOnly: true})
	if err != nil {
		return dialect.SchemaReport{}, fmt.Errorf("inbox: check the schema of %s: begin: %w", i.cfg.table, err)
	}
	defer func() { _ = tx.Rollback(ctx) }() // it only read: nothing to keep, and no failure worth reporting
	r, err := i.store.InspectSchema(ctx, tx)
	if err == nil {
		err = inspectFingerprint(ctx, i.store.Dialect(), tx, i.cfg, &r)
	}
	return r, err
}

// storedIDType returns the type of message_id as the last schema check found it, or, before any check passed, the
// configured one.
func (i *core) storedIDType() IDType {
	if t, ok := i.readiness.Passed(); ok {
		return t
	}
	return i.cfg.idType
}
