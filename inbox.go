package inbox

import (
	"database/sql"
	"fmt"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/internal/readiness"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// Inbox deduplicates the messages of Watermill handlers against an inbox table in the database of their effects
// (PostgreSQL, or MySQL and MariaDB through mysqlinbox). Build one with New and install its Middleware on a router,
// or use the package-level Middleware. An Inbox is safe for concurrent use and holds no goroutines, so it needs no
// closing.
type Inbox struct {
	*core // what every mode shares: the database, the options, the store (core.go)
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
			"save no round trip; it needs PostgreSQL and pgxinbox over a *pgxpool.Pool, a *pgxpool.Conn or a *pgx.Conn, "+
			"not behind pgxinbox.PlainBegin", ErrInvalidOption)
	}
	if _, ok := d.dialect.(dialect.Fingerprinter); c.fingerprint != nil && !ok {
		return nil, fmt.Errorf("%w: WithFingerprint: the %s inbox cannot store fingerprints", ErrInvalidOption, d.dialect.Name())
	}
	s := store.New(d.dialect, c.table, d.pool)
	return &Inbox{&core{db: d, cfg: c, store: s, batches: newBatches(d, c, s), readiness: readiness.New[IDType](s.Losses())}}, nil
}

// claimsAtCommit reports whether d's transactions can send the claim with COMMIT: its dialect writes the claim as
// a plain INSERT, and its pool's transactions send a statement with their COMMIT (driver.TxCaps.CommitWith).
func claimsAtCommit(d *Database) bool {
	_, claimer := d.dialect.(dialect.AtCommitClaimer)
	return claimer && d.caps.CommitWith != nil
}
