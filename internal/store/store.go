// Package store runs every statement of the inbox's message path through the database's dialect: the claims (one
// message, a batch, a lease, at commit), the reads of a row, the produced messages, the savepoints of a joined
// transaction, the lease holder's compare-and-sets and the fingerprints. It alone classifies the database's errors,
// into the sentinels of errors.go that the inbox package exports. The modes call it and never the dialect.
package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/produced"
)

// States of an inbox row. The transaction mode writes StateDone, or StateApplying inside a transaction it does
// not commit; lease mode the other four.
const (
	StateApplying   = "applying"   // claimed in a foreign transaction, handler still running; never committed
	StateProcessing = "processing" // a holder runs the handler; its lease ends at locked_until
	StateReleased   = "released"   // the last attempt failed; the next copy may claim at once
	StateDone       = "done"       // the effect landed; copies are skipped
	StateFailed     = "failed"     // dead-lettered after the last attempt; copies are acked without running
)

// Store runs the message path's operations on the inbox table through the database's dialect, which holds their
// SQL, and turns the dialect's errors into the inbox's: what the caller branches on becomes a sentinel.
type Store struct {
	d dialect.Dialect
	// claims, leases and schema are d's concerns, asked for once by New.
	claims dialect.Claims
	leases dialect.Leases
	schema dialect.Schema
	caps   capabilities // d's optional interfaces
	table  string
	pool   driver.Pool
	ids    sync.Map // consumer name -> int: the id the database stores for it
	// losses counts the statements that found the table missing; the inbox's schema gate checks again after one
	// (internal/readiness).
	losses atomic.Uint64
}

// Losses is the count of this store's statements that found the table missing.
func (s *Store) Losses() *atomic.Uint64 { return &s.losses }

func New(d dialect.Dialect, table string, pool driver.Pool) *Store {
	return &Store{d: d, claims: d.Claims(), leases: d.Leases(), schema: d.Schema(), caps: capabilitiesOf(d),
		table: table, pool: pool}
}

// ConsumerID returns the id the database stores for consumer, registering the name the first time this Inbox
// meets it, in a short transaction of its own that has committed when the id is used: a claim then never names an
// id that a rollback could take back. Ids are forgotten when a statement finds the table gone, or a claim finds
// its id no longer the consumer's (wrap), since a consumers table made anew numbers its consumers anew. The
// claims check the id themselves, in the same statement, so that the cache costs no round trip and a stale id
// costs one failed claim.
func (s *Store) ConsumerID(ctx context.Context, consumer string) (int, error) {
	if id, ok := s.ids.Load(consumer); ok {
		return id.(int), nil
	}
	id, err := s.schema.ConsumerID(ctx, s.pool, s.table, consumer)
	if err != nil {
		switch s.d.Classify(err) {
		case dialect.NoTable:
			s.losses.Add(1)
			return 0, fmt.Errorf("inbox: register consumer %s in table %s: %w: %w", consumer, s.table, ErrSchemaMissing, err)
		case dialect.SequenceExhausted:
			return 0, fmt.Errorf("inbox: register consumer %s in table %s: %w: every id of %s_consumers is taken by a name "+
				"registered before; give consumers fixed names, and this one a table of its own (WithTable): %w",
				consumer, s.table, ErrConsumerIDsExhausted, s.table, err)
		case dialect.ClientEncoding, dialect.Untranslatable:
			return 0, fmt.Errorf("inbox: register consumer %s: %w: %w", consumer, ErrClientEncoding, err)
		}
		return 0, fmt.Errorf("inbox: register consumer %s: %w", consumer, PoolerHint(s.d, err))
	}
	s.ids.Store(consumer, id)
	return id, nil
}

// Claim inserts the row for (consumer, id) in tx, in state, and reports whether tx now owns it. false means the
// message was applied before, by a transaction that committed.
func (s *Store) Claim(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return false, err
	}
	claimed, err := s.claims.Claim(ctx, tx, dialect.ClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: state})
	if err != nil {
		return false, s.wrap(opClaim, consumer, id, err)
	}
	return claimed, nil
}

// ClaimFresh claims (consumer, id) in a subscriber's transaction after the claim's check of the consumer's id failed
// there (ErrStaleConsumer): that transaction's snapshot may be older than the consumer's registration, so its check
// cannot tell a stale id from one registered since. The transaction is rolled back to the savepoint set before the
// claim, the id is asked for again in a transaction of its own, and the claim trusts it (dialect.ClaimParams.Fresh).
func (s *Store) ClaimFresh(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	if err := s.claims.Savepoint(ctx, tx, dialect.RollbackSavepoint); err != nil {
		return false, fmt.Errorf("inbox: claim %s/%s: roll back to the savepoint after a stale consumer id: %w", consumer, id, err)
	}
	cid, err := s.ConsumerID(ctx, consumer) // wrap forgot the ids: this registers the name again
	if err != nil {
		return false, err
	}
	claimed, err := s.claims.Claim(ctx, tx, dialect.ClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: state, Fresh: true})
	if err != nil {
		return false, s.wrap(opClaim, consumer, id, err)
	}
	return claimed, nil
}

// ClaimBatch claims a batch's sorted, distinct ids of consumer in tx as applied, 'done', in one statement where
// the dialect can, and returns the ones tx now owns. It, ReadFinished, Holds, Unclaim, Savepoint, SaveProduced and
// Explain are the batch engine's statements (batch.Store), classified as they are without batching.
func (s *Store) ClaimBatch(ctx context.Context, tx driver.Tx, consumer string, ids []string) ([]string, error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return nil, err
	}
	claimed, err := s.claims.ClaimBatch(ctx, tx, dialect.ClaimBatchParams{Table: s.table, Consumer: consumer, ConsumerID: cid, IDs: ids, State: StateDone})
	if err != nil {
		return nil, s.wrap(opBatchClaim, consumer, fmt.Sprintf("(%d IDs)", len(ids)), err)
	}
	return claimed, nil
}

// Unclaim deletes the row tx claimed for (consumer, id) and has not committed: a batch's member gives its claim back.
func (s *Store) Unclaim(ctx context.Context, tx driver.Tx, consumer, id string) error {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return err
	}
	if err := s.claims.Unclaim(ctx, tx, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id}); err != nil {
		return s.wrap(opGiveBack, consumer, id, err)
	}
	return nil
}

// Produced returns the state of (consumer, id) and the messages the handler produced when it applied it, if any
// were stored.
func (s *Store) Produced(ctx context.Context, q driver.Executor, consumer, id string) (state string, msgs []*message.Message, err error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return "", nil, err
	}
	state, raw, err := s.claims.ReadRow(ctx, q, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id})
	if err != nil {
		return "", nil, s.wrap(opReadProduced, consumer, id, err)
	}
	msgs, err = DecodeProduced(consumer, id, raw)
	return state, msgs, err
}

// Holds reports whether tx still has the row of (consumer, id) that it claimed. A batch asks after a member's
// statement failed; an error is then most often the transaction's own: it can no longer run statements.
func (s *Store) Holds(ctx context.Context, tx driver.Tx, consumer, id string) (bool, error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return false, err
	}
	_, _, err = s.claims.ReadRow(ctx, tx, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id})
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// ReadOutsideSnapshot reads what Produced does, in a short transaction of its own on db: outside the snapshot of a caller's
// REPEATABLE READ transaction.
func (s *Store) ReadOutsideSnapshot(ctx context.Context, pool driver.Pool, consumer, id string) (state string, msgs []*message.Message, err error) {
	err = InShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		state, msgs, err = s.Produced(ctx, tx, consumer, id)
		return err
	})
	return state, msgs, err
}

// SaveProduced stores the produced column raw (from EncodeProduced) for the row claimed in tx. In a transaction
// the inbox commits, the row is 'done' from its claim and a separate statement is safe; a claim made 'applying' is
// finished by Finish instead, which stores them in the same statement.
func (s *Store) SaveProduced(ctx context.Context, tx driver.Tx, consumer, id string, raw []byte) error {
	if raw == nil {
		return nil
	}
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return err
	}
	err = s.claims.SaveProduced(ctx, tx, dialect.ProducedParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Produced: raw})
	if err != nil {
		return s.wrapProduced(opStoreProduced, consumer, id, err)
	}
	return nil
}

// Finish turns an 'applying' claim 'done' and stores raw with it, in one statement.
func (s *Store) Finish(ctx context.Context, tx driver.Tx, consumer, id string, raw []byte) error {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return err
	}
	ok, err := s.claims.Finish(ctx, tx, dialect.ProducedParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Produced: raw})
	if err != nil {
		return s.wrapProduced(opFinish, consumer, id, err)
	}
	if !ok {
		return fmt.Errorf("inbox: finish claim %s/%s: the claim is no longer 'applying' in this transaction", consumer, id)
	}
	return nil
}

// TakeOver claims, in tx, a row that lease mode left free: 'released' by a failed attempt, or 'processing' with a
// lease that ran out. It reports false when the row is held by a live lease, or finished, by now.
func (s *Store) TakeOver(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return false, err
	}
	took, err := s.claims.TakeOver(ctx, tx, dialect.ClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: state})
	if err != nil {
		return false, s.wrap(opTakeOver, consumer, id, err)
	}
	return took, nil
}

// Savepoint runs one step of the savepoint around a claim in a subscriber's transaction, or a batch's member.
func (s *Store) Savepoint(ctx context.Context, tx driver.Tx, step dialect.SavepointStep) error {
	return s.claims.Savepoint(ctx, tx, step)
}

// ReadFinished returns the rows of consumer and ids that are 'done' or 'failed', by ID, when the dialect reads many
// in one statement (ok is false when it does not): a batch's member whose row is either ends without a transaction
// of its own; one that lease mode holds or left goes on alone, to take it over or wait.
func (s *Store) ReadFinished(ctx context.Context, tx driver.Tx, consumer string, ids []string) (rows map[string]dialect.StoredRow, ok bool, err error) {
	r := s.caps.rows
	if r == nil {
		return nil, false, nil
	}
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return nil, true, err
	}
	rows, err = r.ReadRows(ctx, tx, dialect.RowsParams{Table: s.table, Consumer: consumer, ConsumerID: cid, IDs: ids})
	if err != nil {
		return nil, true, s.wrap(opReadRows, consumer, fmt.Sprintf("(%d IDs)", len(ids)), err)
	}
	maps.DeleteFunc(rows, func(_ string, row dialect.StoredRow) bool {
		return row.State != StateDone && row.State != StateFailed
	})
	return rows, true, nil
}

// Dialect returns the dialect the store runs its statements in.
func (s *Store) Dialect() dialect.Dialect { return s.d }

// Explain adds PoolerHint's advice to a driver error.
func (s *Store) Explain(err error) error { return PoolerHint(s.d, err) }

// wrapProduced wraps the failure of a statement that stores produced messages. A value the database refuses
// (data exceptions, limits, a check constraint) would be refused on every redelivery too: it becomes
// ErrProducedUnstorable, which the middleware dead-letters instead of running the handler again and again.
//
// So would a statement after a result the handler left open on the transaction (ErrResultLeftOpen), on a
// transaction the handler gets as its client library's own (transaction mode): the inbox cannot close that result.
func (s *Store) wrapProduced(op op, consumer, id string, err error) error {
	if resultLeftOpen(err) {
		return fmt.Errorf("inbox: %s %s/%s: %w: %w: %w", op, consumer, id, ErrProducedUnstorable, ErrResultLeftOpen, err)
	}
	if k := s.d.Classify(err); k == dialect.IDRefused || k == dialect.ValueRefused || k == dialect.Untranslatable {
		return fmt.Errorf("inbox: %s %s/%s: %w: the database refused them: %w", op, consumer, id, ErrProducedUnstorable, err)
	}
	return s.wrap(op, consumer, id, err)
}

// JoinsSubscriberTx reports whether the dialect may claim inside a subscriber's transaction, and names it for the
// error when it may not.
func (s *Store) JoinsSubscriberTx() (ok bool, dialectName string) {
	return s.d.JoinsSubscriberTx(), s.d.Name()
}

// Locator returns the dialect's way to tell which database a transaction is on, if it has one.
func (s *Store) Locator() (dialect.Locator, bool) {
	return s.caps.locator, s.caps.locator != nil
}

// InspectSchema compares the table's schema with the shape the inbox needs, in q.
func (s *Store) InspectSchema(ctx context.Context, q driver.Executor) (dialect.SchemaReport, error) {
	r, err := s.schema.InspectSchema(ctx, q, s.table)
	return r, PoolerHint(s.d, err)
}

// ClaimAtCommit returns the claim of (consumer, id) in state 'done' as a statement to send with COMMIT
// (WithClaimAtCommit, which New allows only with a dialect that has one), and its arguments.
func (s *Store) ClaimAtCommit(ctx context.Context, consumer, id string) (query string, args []any, err error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return "", nil, err
	}
	if s.caps.atCommit == nil {
		return "", nil, fmt.Errorf("inbox: the %s dialect cannot send a claim with COMMIT", s.d.Name())
	}
	query, args = s.caps.atCommit.ClaimAtCommit(dialect.ClaimParams{
		Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: StateDone})
	return query, args, nil
}

// wrap adds the operation and the row to a driver error, and translates the errors callers branch on: "no such
// table" into ErrSchemaMissing, after which this Inbox checks its schema again; a claim's stale
// consumer id into ErrStaleConsumer, after which this Inbox registers its consumers again; and, in the claims,
// an ID the column cannot hold into ErrInvalidEventID, which the middleware dead-letters instead of nacking it
// forever. Only a claim may blame the ID: it is the first statement to send it, and the consumer name, the one other
// input, was checked before. Any later statement sends an ID the claim accepted, so its refusal is something else.
func (s *Store) wrap(op op, consumer, id string, err error) error {
	switch s.d.Classify(err) {
	case dialect.NoTable:
		s.losses.Add(1)
		s.ids.Clear()
		return fmt.Errorf("inbox: %s %s/%s in table %s: %w: %w", op, consumer, id, s.table, ErrSchemaMissing, err)
	case dialect.IDRefused:
		if op.sendsIDFirst() {
			return fmt.Errorf("inbox: %s %s/%s: %w: the database refused it: %w", op, consumer, id, ErrInvalidEventID, err)
		}
	case dialect.SerializationFailure:
		if op.claimsInTx() {
			return Conflict{fmt.Errorf("inbox: %s %s/%s: %w: %w", op, consumer, id, ErrClaimLostLock, err)}
		}
		return Conflict{fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, err)}
	case dialect.LockConflict:
		if op.claimsInTx() {
			return fmt.Errorf("inbox: %s %s/%s: %w: %w", op, consumer, id, ErrClaimLostLock, err)
		}
	case dialect.ClientEncoding, dialect.Untranslatable:
		return fmt.Errorf("inbox: %s %s/%s: %w: %w", op, consumer, id, ErrClientEncoding, err)
	case dialect.StaleConsumer:
		// Every id is forgotten, not only this consumer's: the table that renumbered one renumbered them all.
		s.ids.Clear()
		return fmt.Errorf("inbox: %s %s/%s: %w: %w", op, consumer, id, ErrStaleConsumer, err)
	}
	return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, PoolerHint(s.d, err))
}

// EncodeProduced returns msgs as the produced column keeps them (internal/produced), or nil when there are none.
func EncodeProduced(consumer, id string, msgs []*message.Message) ([]byte, error) {
	raw, err := produced.Encode(msgs)
	if err != nil {
		return nil, fmt.Errorf("inbox: encode produced messages of %s/%s: %w: %w", consumer, id, ErrProducedUnstorable, err)
	}
	return raw, nil
}

// DecodeProduced turns the produced column back into messages; nil (SQL NULL, no row) means none.
func DecodeProduced(consumer, id string, raw []byte) ([]*message.Message, error) {
	msgs, err := produced.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("inbox: decode produced messages of %s/%s: %w", consumer, id, err)
	}
	return msgs, nil
}

// SaveFingerprint stores msg's fingerprint with the row tx claimed, when WithFingerprint is on.
func (s *Store) SaveFingerprint(ctx context.Context, tx driver.Executor, consumer, id string, f []byte) error {
	if f == nil {
		return nil
	}
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return err
	}
	if s.caps.fingerprints == nil {
		return errNoFingerprints(s.d)
	}
	err = s.caps.fingerprints.SaveFingerprint(ctx, tx, dialect.FingerprintParams{Table: s.table, Consumer: consumer,
		ConsumerID: cid, ID: id, Fingerprint: f})
	if err != nil {
		return s.wrap(opStoreFingerprint, consumer, id, err)
	}
	return nil
}

// ReadFingerprint returns the fingerprint stored with the row of (consumer, id), read in q.
func (s *Store) ReadFingerprint(ctx context.Context, q driver.Executor, consumer, id string) ([]byte, error) {
	cid, err := s.ConsumerID(ctx, consumer)
	if err != nil {
		return nil, err
	}
	if s.caps.fingerprints == nil {
		return nil, errNoFingerprints(s.d)
	}
	f, err := s.caps.fingerprints.ReadFingerprint(ctx, q, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id})
	if err != nil {
		return nil, s.wrap(opReadFingerprint, consumer, id, err)
	}
	return f, nil
}
