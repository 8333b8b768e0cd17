package inbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
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

// checkSubscriberTx refuses a message that carries watermill-sql's subscriber transaction when no joiner of the
// Database finds it and WithSubscriberTx(false) was not given. Applying it in a transaction of the inbox's own
// would still apply it once, but would quietly break the one-commit promise the user may count on (the offset, the
// row and the effect together), so the fault is reported, as a configuration's, until the user chooses.
func (i *core) checkSubscriberTx(msg *message.Message) error {
	if i.cfg.lease > 0 || (i.cfg.subscriberTxSet && !i.cfg.subscriberTx) {
		return nil // lease mode never joins; the user chose not to
	}
	ctx := msg.Context()
	handler := message.HandlerNameFromCtx(ctx)
	carries, seen := i.subscriberTxs.carries.Load(handler)
	if !seen {
		carries, _ = i.subscriberTxs.carries.LoadOrStore(handler, carriesSQLSubscriberTx(ctx))
	}
	if !carries.(bool) {
		return nil
	}
	if tx, ok := i.db.joined(ctx); ok {
		return i.checkJoinedNative(tx, handler)
	}
	if joins, name := i.store.JoinsSubscriberTx(); !joins {
		return fmt.Errorf("%w: handler %s reads from watermill-sql's subscriber, whose transaction the %s inbox "+
			"cannot join; give WithSubscriberTx(false) to apply its messages in a transaction of the inbox's own",
			ErrInvalidOption, text.Quote(handler), name)
	}
	return fmt.Errorf("%w: handler %s reads from watermill-sql's subscriber, and the inbox has no joiner for its "+
		"transaction: build the inbox with inbox.New or inbox.Middleware (watermill-sql v3 over database/sql), or "+
		"give inbox.On the joiner of the subscriber's version (inbox.SQLv3Joiner, pgxinbox.SQLv4Joiner for v4), to "+
		"apply each message in that transaction; or give WithSubscriberTx(false) to apply it in one of the inbox's "+
		"own, for a subscriber that reads from another database than the inbox's",
		ErrInvalidOption, text.Quote(handler))
}

// checkJoinedNative refuses a joined transaction that the handler cannot get as its client library's: watermill-sql
// v4's subscriber over pgx under an inbox over database/sql, or over database/sql under an inbox over pgx. The
// inbox's statements would run in it, but TxFromContext would find no transaction in every message, and a handler
// that counts on one would panic on nil, or write its effect outside the transaction that holds the row. A pool that
// does not tell its type (driver.NativeTyper) is let be.
func (i *core) checkJoinedNative(tx driver.Tx, handler string) error {
	nt := i.db.native
	if nt == nil || nt.IsNative(tx.Native()) {
		return nil
	}
	fix := "build the inbox with pgxinbox (pgxinbox.New, or pgxinbox.Database) over the pgx pool the subscriber " +
		"uses, or the subscriber with watermill-sql's database/sql adapter (BeginnerFromStdSQL) over the inbox's *sql.DB"
	if _, std := tx.Native().(*sql.Tx); std {
		fix = "build the subscriber with watermill-sql's pgx adapter (BeginnerFromPgx) over the inbox's pool, or the " +
			"inbox over database/sql: inbox.On(driver.StdSQL(db), pgxinbox.SQLv4Joiner()) with the subscriber's *sql.DB"
	}
	return fmt.Errorf("%w: handler %s reads from watermill-sql's subscriber through its adapter for another client "+
		"library than the inbox's: the subscriber's transaction is a %T, and the inbox's handlers ask for a %s, so "+
		"TxFromContext would find none; %s; or give WithSubscriberTx(false) to apply each message in a transaction "+
		"of the inbox's own", ErrInvalidOption, text.Quote(handler), tx.Native(), nt.NativeType(), fix)
}

// checkJoinedDatabase refuses a joined transaction on another database than the inbox's pool reaches: a subscriber
// that reads from another database, joined by default. The claim would find no inbox table there (or another
// inbox's, whose rows the inbox's own operations never see), and the error would say to run Migrate, which ran. It
// asks once per handler, in the savepoint of the message's attempt, so that a failure leaves the subscriber's
// transaction usable; an answer that differs is checked again with the pool's asked anew, in case the server
// restarted, and is not remembered. A dialect that cannot tell (dialect.Locator) is let be.
func (i *core) checkJoinedDatabase(ctx context.Context, tx driver.Tx, handler string) error {
	loc, ok := i.store.Locator()
	if !ok {
		return nil
	}
	if _, same := i.subscriberTxs.sameDatabase.Load(handler); same {
		return nil
	}
	theirs, err := loc.Locate(ctx, tx)
	if err != nil {
		return fmt.Errorf("inbox: check the database of the subscriber's transaction: %w", err)
	}
	ours, err := i.db.location(ctx, loc, false)
	if err == nil && ours != theirs {
		ours, err = i.db.location(ctx, loc, true)
	}
	if err != nil {
		return fmt.Errorf("inbox: check the database of the inbox: %w", err)
	}
	if ours != theirs {
		return fmt.Errorf("%w: handler %s reads from watermill-sql's subscriber, whose transaction is on another "+
			"database than the inbox's (%s; the inbox's is %s), and the inbox joins that transaction by default: "+
			"give WithSubscriberTx(false) to apply each message in a transaction of the inbox's own, on its database, "+
			"or build the inbox over the subscriber's database", ErrInvalidOption, text.Quote(handler), theirs, ours)
	}
	i.subscriberTxs.sameDatabase.Store(handler, struct{}{})
	return nil
}

// carriesSQLSubscriberTx reports whether ctx holds the transaction watermill-sql's subscriber (v3 or v4) puts in
// a message's context. v3's is found through its own TxFromContext. v4's package is not imported here (it compiles
// pgx into every program that imports it), so its subscriber is recognised by the name Watermill's router gives
// it (message.SubscriberNameFromCtx): its type, sql.Subscriber, named before the router's decorators wrap it.
func carriesSQLSubscriberTx(ctx context.Context) bool {
	if _, ok := wsql.TxFromContext(ctx); ok {
		return true
	}
	return message.SubscriberNameFromCtx(ctx) == sqlSubscriberName
}

// sqlSubscriberName is the name Watermill's router gives watermill-sql's subscriber, of v3 and v4 alike.
const sqlSubscriberName = "sql.Subscriber"
