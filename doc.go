// Package inbox gives Watermill consumers exactly-once effects on top of at-least-once delivery: the
// transactional inbox, or idempotent consumer, on PostgreSQL. New and Middleware take a *sql.DB; the pgxinbox
// module runs the same inbox over pgx v5, and the mysqlinbox module over MariaDB, each through On or OnDialect and
// the driver and dialect packages. The maintenance calls (Migrate, Cleanup, ReadStats, Forget and the rest) are
// methods of a Database, the same on every one: inbox.OnSQL(db).Migrate(ctx), pgxinbox.Database(pool).Migrate(ctx),
// mysqlinbox.Database(db).Migrate(ctx).
//
// Every broker redelivers: after a crash between the side effect and the acknowledgement, after a rebalance that
// hands a partition to another consumer while the old one is still writing, when a producer or an outbox relay
// publishes twice, and when a lock or visibility timeout runs out mid-handler. The inbox makes the redelivered copy
// harmless. In one database transaction it inserts the producer's event ID into an inbox table and runs the
// handler's side effect; it commits, and only then lets the router acknowledge. A copy finds the row, is skipped
// and acknowledged. Copies that race are serialized by the table's primary key; there is no distributed lock.
//
//	router.AddMiddleware(inbox.Middleware(db, inbox.WithDeadLetter(pub, "wallet-credits.dead")))
//	router.AddConsumerHandler("wallet-credits", "deposits", sub, inbox.Handler(
//		func(ctx context.Context, tx *sql.Tx, msg *message.Message) error {
//			return accounts.Credit(ctx, tx, msg) // the side effect, written on the inbox's transaction
//		}))
//
// Handler never calls its function without a transaction; TxFromContext gives it to a handler that takes it later.
// Errors that hold messages back are logged to standard error unless WithLogger is given.
//
// # Modes
//
// The transaction mode above covers side effects in the same database. For a call to a provider outside it, such
// as a payment API, WithLease switches to lease mode: a short transaction records the message as processing with a
// lease, the handler calls out with the stable key from LeaseFromContext, and the row becomes done only if the
// lease is still the handler's. For an outgoing event, write it on the inbox transaction with watermill-sql's
// publisher and let Watermill's forwarder relay it: inbox, then outbox.
//
// # What is guaranteed
//
// For each consumer (by default the Watermill handler's name) and event ID, the effects a handler makes on the
// transaction from TxFromContext are committed at most once, and a message is acknowledged only after they are.
// With an at-least-once broker that makes them committed exactly once. Messages a handler returns are stored with
// the inbox row and returned again on every redelivery, so they reach the publisher at least once, with UUIDs and
// event IDs derived from the consumer, the event ID and their position (ProducedMessageUUID), which the next inbox
// recognises.
//
// # What is not
//
// Effects outside the transaction (an HTTP call, an e-mail, a write through another connection) are not covered:
// they run again when the transaction rolls back. The inbox remembers an ID only as long as its row exists; a
// redelivery older than the retention window is applied again. Messages without a usable event ID are never
// applied: they are dead-lettered, or nacked after a delay when no dead-letter publisher is configured.
package inbox
