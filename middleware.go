package inbox

import (
	"database/sql"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Middleware wraps h so that each message is applied at most once per consumer. The path of one message:
//
//  0. Once, before the first message: check the inbox table (creating it unless WithAutoMigrate(false)) and learn
//     the type of its IDs. A schema or configuration fault holds every message back for the reject delay.
//  1. Read the event ID; a message without a usable one is dead-lettered or nacked after a delay.
//  2. Begin a transaction, or join the one watermill-sql's subscriber carries (through the Database's joiners), or,
//     in batch mode, share one with the messages in flight beside it (batch.go, internal/batch).
//  3. Claim (consumer, ID) in the inbox table. If it was claimed before, skip h: roll back, and return the
//     messages h produced the first time so the router sends them again.
//  4. Run h with the transaction in its context (TxFromContext); h does its side effect on it. The messages h
//     returns get identities derived from (consumer, ID, position) and are stored with the row.
//  5. Commit, and only then return, so the router acks after the effect is durable. An error, a panic or a
//     cancelled context rolls back the effect and the claim together, and the router nacks.
//
// In lease mode (WithLease) steps 2 to 5 are different: the claim is a short transaction of its own that records a
// lease, the handler calls out with an idempotency key, and the row is marked done afterwards (see WithLease).
func (i *Inbox) Middleware(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		if err := i.ready(msg); err != nil { // schema and consumer name usable? if not, nacked after a delay
			return nil, err
		}
		consumer, id, err := i.identify(msg)
		if err != nil {
			return nil, i.reject(msg, consumer, err)
		}
		// A consumer's first message registers its name on a connection of its own: before a transaction holds
		// one, or handlers that each hold one and wait for another would drain the pool for good.
		if _, err := i.store.ConsumerID(ctx, consumer); err != nil {
			return nil, i.settle(msg, consumer, err)
		}
		if i.cfg.lease > 0 {
			return i.applyLeased(msg, consumer, id, h) // for effects outside the database
		}
		if tx, ok := i.db.joined(ctx); ok && i.cfg.subscriberTx {
			return i.applyInSubscriberTx(tx, msg, consumer, id, h) // commits on the subscriber's ack
		}
		if i.cfg.batchSize > 0 {
			return i.applyBatched(msg, consumer, id, h) // one transaction shared with concurrent messages
		}
		if i.cfg.claimAtCommit {
			return i.applyAtCommit(msg, consumer, id, h) // the claim goes with COMMIT (atcommit.go)
		}
		return i.applyOwn(msg, consumer, id, h)
	}
}

// Middleware returns a router middleware that applies each message at most once per consumer, with its effect,
// in one transaction:
//
//	router.AddMiddleware(inbox.Middleware(db))
//
// On a fresh database that one line is enough: the first message creates the inbox's tables (see WithAutoMigrate).
// It panics, once and at construction, with an error wrapping ErrInvalidOption if an option is invalid (nil, say);
// use New to get the error instead.
func Middleware(db *sql.DB, opts ...Option) message.HandlerMiddleware {
	i, err := New(db, opts...)
	if err != nil {
		panic(err)
	}
	return i.Middleware
}
