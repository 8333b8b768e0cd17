package inbox

import (
	"errors"

	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// Errors of a message that cannot be applied as it is: the reasons a dead letter carries (WithDeadLetter).
var (
	// ErrMissingEventID reports a message that carries no event ID: there is nothing to deduplicate on, so the inbox
	// refuses to apply it. Such a message is dead-lettered, or nacked after the reject delay when no dead-letter
	// publisher is configured.
	ErrMissingEventID = errors.New("inbox: message has no event ID")

	// ErrInvalidEventID reports an event ID that the inbox cannot store faithfully: empty, longer than the configured
	// maximum, or holding bytes PostgreSQL's text type rejects (NUL, invalid UTF-8). It is handled like
	// ErrMissingEventID.
	ErrInvalidEventID = store.ErrInvalidEventID

	// ErrProducedUnstorable reports messages a handler returned that the inbox cannot store with its row (the database
	// refused the value, or a message is nil). Storing them would fail on every redelivery, so the message is handled
	// like one without a usable event ID: its effect is rolled back and it is dead-lettered with the reason, or nacked
	// after the reject delay.
	ErrProducedUnstorable = store.ErrProducedUnstorable

	// ErrFingerprintConflict reports, with WithFingerprint, a copy whose event ID was applied before for a message with
	// another fingerprint: the producer reused the ID for another event. The copy is skipped, or dead-lettered with it
	// as the reason when Fingerprint.DeadLetter says so.
	ErrFingerprintConflict = errors.New("inbox: event ID reused for another message")

	// ErrAttemptsExhausted reports, in lease mode, a message whose handler failed on every allowed attempt.
	ErrAttemptsExhausted = errors.New("inbox: attempts exhausted")

	// ErrStmtOfAnotherDB reports, in batch mode (WithBatch) and in every mode on MySQL and MariaDB, a handler that gave
	// its *sql.Tx a statement prepared on the application's *sql.DB (tx.StmtContext(ctx, stmt)). There the handler's
	// transaction is the inbox's view of the batch, or of the message's own transaction (docs/guides/mariadb.md), on a
	// connection pool of the inbox's own, and database/sql refuses statements of another pool on it, as it would on
	// every redelivery: the message is dead-lettered with the reason at its first delivery (nacked after the reject
	// delay without a dead-letter topic), its effect rolled back. Prepare the statement on the transaction itself
	// (tx.PrepareContext), or run it with tx.ExecContext; in transaction mode on PostgreSQL the handler gets a
	// transaction of the application's *sql.DB, which takes such statements.
	ErrStmtOfAnotherDB = errors.New("inbox: in batch mode, and in every mode on MySQL and MariaDB, the handler's *sql.Tx " +
		"belongs to the inbox's own pool, so it cannot run a statement prepared on the application's *sql.DB; prepare it " +
		"with tx.PrepareContext instead")
)

// Errors of the configuration, the schema or the wiring, which no retry of the message mends.
var (
	// ErrNoConsumer reports a message handled without a consumer name: the middleware runs outside a Watermill router
	// (which names every handler) and WithConsumer was not given.
	ErrNoConsumer = errors.New("inbox: no consumer name: set WithConsumer or run the middleware inside a router")

	// ErrInvalidOption reports an option that cannot work. It is returned by New and Migrate, and Middleware panics
	// with it, at construction. Two mistakes only show per message, and the middleware then nacks the message after the
	// reject delay with an error wrapping ErrInvalidOption (the message is fine, so it is never dead-lettered): a
	// handler name that cannot be a consumer name (see WithConsumer), and a WithIDType that the existing table
	// contradicts.
	ErrInvalidOption = errors.New("inbox: invalid option")

	// ErrSchemaMissing reports that the inbox table does not exist: run Migrate, or apply the SQL in
	// dialect/postgres/migrations/. The middleware creates the table itself unless WithAutoMigrate(false) is given;
	// then it nacks each message after the reject delay until the table exists.
	ErrSchemaMissing = store.ErrSchemaMissing

	// ErrSchemaDrift reports inbox tables that exist but not in the shape the inbox needs: a column of another type, a
	// missing index, a disabled trigger, an inbox table dropped while its migrations table still records it. The error
	// names each difference. Migrate returns it, checking what it leaves behind, and changes nothing; the middleware
	// returns it, nacking each message after the reject delay and never dead-lettering it, until the schema is mended.
	ErrSchemaDrift = errors.New("inbox: schema differs from what the inbox needs")

	// ErrConsumerIDsExhausted reports a new consumer name that the inbox table cannot register because every consumer
	// id is taken: on PostgreSQL each row carries a smallint id of its consumer, 32,767 per table, and a registered
	// name keeps its id for good, running or not (Stats.ConsumerIDsLeft tells how many are left). Consumers registered
	// before keep working. The middleware nacks the new consumer's messages after the reject delay, never
	// dead-lettering them: give consumers fixed names instead of names made per process or deployment, and a new one a
	// table of its own (WithTable).
	ErrConsumerIDsExhausted = store.ErrConsumerIDsExhausted

	// ErrClientEncoding reports a PostgreSQL connection whose session was switched from UTF8 to another client_encoding
	// (SET client_encoding, run by a handler, a pool hook or other code on a pooled connection). The server would read
	// the event ID sent as UTF-8 in that encoding and store another ID, which could meet another message's row, so the
	// inbox's statements refuse such a session before they write anything. The handler does not run; the middleware
	// nacks the message after the reject delay and never dead-letters it: the message is fine, the connection is not. A
	// database whose own encoding is neither UTF8 nor SQL_ASCII and has no character for one of an ID's is reported the
	// same way, since the server's error does not tell the two apart.
	ErrClientEncoding = store.ErrClientEncoding

	// ErrNoTx reports a handler built with Handler or ProducingHandler (or pgxinbox's) that found no transaction of its
	// kind in its message's context, so its function was not called: the error says why and what to do. It is a fault
	// of the wiring, so retrying the message cannot mend it: under the inbox's middleware the message is held back for
	// the reject delay, as for other configuration faults, and IsPermanent reports true.
	ErrNoTx = errors.New("inbox: no inbox transaction in the message's context")
)

// Errors of lease mode (WithLease), which another holder of the lease resolves.
var (
	// ErrLeaseHeld reports, in lease mode, a message whose lease another consumer holds: it may still succeed, or die
	// and let its lease run out. The middleware returns it, after a delay, so the router nacks the copy for later.
	ErrLeaseHeld = errors.New("inbox: lease is held by another consumer")

	// ErrLeaseLost reports, in lease mode, a holder whose lease was taken over after it expired: its writes to the
	// inbox row are refused, so it cannot overwrite the new holder's state.
	ErrLeaseLost = store.ErrLeaseLost
)

// Errors a handler's transaction returns when the handler does what the inbox must do itself.
var (
	// ErrTxShared is what Commit and Rollback return on the transaction a handler finds in its context in batch mode
	// (WithBatch): the batch's, which the inbox commits once every handler of the batch has returned. The batch is
	// unharmed by the call; a handler that wants its message rolled back returns an error instead.
	ErrTxShared = driver.ErrTxShared

	// ErrHandlerReturned is what a statement returns, in batch mode (WithBatch) and in every mode on MySQL and MariaDB,
	// on the transaction of a handler that has returned: a goroutine that outlives its handler cannot write into the
	// batch's commit, whatever the handler returned. Finish the handler's writes before it returns.
	ErrHandlerReturned = driver.ErrHandlerReturned

	// ErrTxEnded is what a statement, and the inbox's commit, return on MySQL and MariaDB once the server rolled the
	// message's transaction back under a failed statement of the handler's (a deadlock, or a lock-wait timeout with
	// innodb_rollback_on_timeout): the server would run whatever follows in autocommit, outside the transaction that
	// holds the inbox's claim. It wraps the statement's error. The message is nacked, nothing of it commits, and its
	// redelivery applies it (docs/guides/mariadb.md).
	ErrTxEnded = driver.ErrTxEnded

	// ErrResultLeftOpen reports a handler that returned with a result of its transaction still open (an unscanned
	// QueryRowContext, Rows it did not close) and produced messages: the client library refuses the statement that
	// stores them, as it would on every redelivery, so the message is handled as ErrProducedUnstorable says. Scan or
	// close every result before the handler returns. In batch mode the inbox closes such results itself.
	ErrResultLeftOpen = store.ErrResultLeftOpen
)

// Answers of the maintenance calls.
var (
	// ErrNotFound reports that the inbox has no row for a consumer and event ID: the message was never applied, or
	// its row was cleaned up.
	ErrNotFound = store.ErrNotFound

	// ErrShortMemory reports a consumer whose inbox remembers less than the redelivery window declared for it: a
	// copy redelivered from before its oldest row would be applied again. The Cleaner logs it; Remembers and
	// ConsumerMemory.Covers let you check for it yourself.
	ErrShortMemory = errors.New("inbox: remembers less than the redelivery window")
)

// unusable carries why a message can never be applied, from apply to settle.
type unusable struct{ error }

func (u unusable) Unwrap() error { return u.error }
