package inbox

import (
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/batch"
	"github.com/effectively-once/watermill-inbox/internal/readiness"
	"github.com/effectively-once/watermill-inbox/internal/store"
	"github.com/effectively-once/watermill-inbox/internal/text"
)

// Inbox deduplicates the messages of Watermill handlers against an inbox table in the database of their effects
// (PostgreSQL, or MySQL and MariaDB through mysqlinbox). Build one with New and install its Middleware on a router,
// or use the package-level Middleware. An Inbox is safe for concurrent use and holds no goroutines, so it needs no
// closing.
type Inbox struct {
	db            *Database
	cfg           config
	store         *store.Store
	readiness     *readiness.Gate[IDType]
	subscriberTxs subscriberTxs
	batches       *batch.Engine // batch mode's (WithBatch); nil without it
	warnedNoDLQ   atomic.Bool   // warnNoDeadLetter has logged
}

// New checks the options and returns an Inbox over db. It does not touch the database. Its first message checks
// the schema, creates it when it is missing (unless WithAutoMigrate(false) is given), and learns the type of the
// message_id column; a message that arrives while the schema cannot be used is nacked after the reject delay.
func New(db *sql.DB, opts ...Option) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidOption)
	}
	return OnSQL(db).New(opts...)
}

// New checks the options and returns an Inbox over d, as the package-level New does over a *sql.DB, which is
// OnSQL(db).New.
func (d *Database) New(opts ...Option) (*Inbox, error) {
	if err := d.check(""); err != nil {
		return nil, err
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if !d.dialect.JoinsSubscriberTx() && (len(d.joiners) > 0 || (c.subscriberTxSet && c.subscriberTx)) {
		return nil, fmt.Errorf("%w: the %s inbox cannot join a subscriber's transaction: it has no way to fail a commit "+
			"that would keep an unfinished claim; let the inbox begin its own transaction (WithSubscriberTx(false))",
			ErrInvalidOption, d.dialect.Name())
	}
	if c.claimAtCommit && !claimsAtCommit(d) {
		return nil, fmt.Errorf("%w: WithClaimAtCommit: this database cannot send the claim with COMMIT, so the option would "+
			"save no round trip; it needs pgxinbox over a *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn, and PostgreSQL", ErrInvalidOption)
	}
	if _, ok := d.dialect.(dialect.Fingerprinter); c.fingerprint != nil && !ok {
		return nil, fmt.Errorf("%w: WithFingerprint: the %s inbox cannot store fingerprints", ErrInvalidOption, d.dialect.Name())
	}
	s := store.New(d.dialect, c.table, d.pool)
	return &Inbox{db: d, cfg: c, store: s, batches: newBatches(d, c, s), readiness: readiness.New[IDType](s.Losses())}, nil
}

// claimsAtCommit reports whether d's transactions can send the claim with COMMIT: its dialect writes the claim as
// a plain INSERT, and its pool's transactions send a statement with their COMMIT.
func claimsAtCommit(d *Database) bool {
	_, claimer := d.dialect.(dialect.AtCommitClaimer)
	p, ok := d.pool.(driver.CommitWithPool)
	return claimer && ok && p.CommitsWith()
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

// identify returns the consumer scope and event ID of msg, or why the inbox cannot apply it.
func (i *Inbox) identify(msg *message.Message) (consumer, id string, err error) {
	consumer = i.cfg.consumer
	if consumer == "" {
		consumer = message.HandlerNameFromCtx(msg.Context())
	}
	if consumer == "" {
		return "", "", ErrNoConsumer
	}
	if i.cfg.useUUID {
		id = msg.UUID
	} else {
		var ok bool
		if id, ok = msg.Metadata[i.cfg.idKey]; !ok {
			return consumer, "", fmt.Errorf("%w: metadata key %q is not set", ErrMissingEventID, i.cfg.idKey)
		}
	}
	if err := i.validateID(id); err != nil {
		return consumer, id, err
	}
	// The type is the table's, learned before the first message, never only the option's: an ID spelled two ways
	// that the uuid column stores as one must reach the handler, its keys and the logs as that one.
	if i.storedIDType() == IDTypeUUID {
		u, err := uuid.Parse(id)
		if err != nil {
			return consumer, id, fmt.Errorf("%w: %q is not a UUID, and the inbox stores UUIDs", ErrInvalidEventID, id)
		}
		id = u.String() // the form PostgreSQL returns, so logs and keys agree with the stored row
	}
	return consumer, id, nil
}

// validateID rejects what PostgreSQL's text type cannot hold or an index should not: an ID stored differently from
// the one sent would deduplicate nothing.
func (i *Inbox) validateID(id string) error {
	if problem := text.Problem(id, i.cfg.maxIDLength); problem != "" {
		return fmt.Errorf("%w: %s", ErrInvalidEventID, problem)
	}
	return nil
}
