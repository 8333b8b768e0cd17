package inbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/batch"
	"github.com/effectively-once/watermill-inbox/internal/readiness"
)

// store runs the message path's operations on the inbox table through the database's dialect, which holds their
// SQL, and turns the dialect's errors into the inbox's: what the caller branches on becomes a sentinel.
type store struct {
	d     dialect.Dialect
	table string
	pool  driver.Pool
	ids   sync.Map // consumer name -> int: the id the database stores for it
}

func newStore(d dialect.Dialect, table string, pool driver.Pool) *store {
	return &store{d: d, table: table, pool: pool}
}

// consumerID returns the id the database stores for consumer, registering the name the first time this Inbox
// meets it, in a short transaction of its own that has committed when the id is used: a claim then never names an
// id that a rollback could take back. Ids are forgotten when a statement finds the table gone, or a claim finds
// its id no longer the consumer's (wrap), since a consumers table made anew numbers its consumers anew. The
// claims check the id themselves, in the same statement, so that the cache costs no round trip and a stale id
// costs one failed claim.
func (s *store) consumerID(ctx context.Context, consumer string) (int, error) {
	if id, ok := s.ids.Load(consumer); ok {
		return id.(int), nil
	}
	id, err := s.d.ConsumerID(ctx, s.pool, s.table, consumer)
	if err != nil {
		switch s.d.Classify(err) {
		case dialect.NoTable:
			readiness.Lost(s.table)
			return 0, fmt.Errorf("inbox: register consumer %s in table %s: %w: %w", consumer, s.table, ErrSchemaMissing, err)
		case dialect.SequenceExhausted:
			return 0, fmt.Errorf("inbox: register consumer %s in table %s: %w: every id of %s_consumers is taken by a name "+
				"registered before; give consumers fixed names, and this one a table of its own (WithTable): %w",
				consumer, s.table, ErrConsumerIDsExhausted, s.table, err)
		}
		return 0, fmt.Errorf("inbox: register consumer %s: %w", consumer, poolerHint(s.d, err))
	}
	s.ids.Store(consumer, id)
	return id, nil
}

// claim inserts the row for (consumer, id) in tx, in state, and reports whether tx now owns it. false means the
// message was applied before, by a transaction that committed.
func (s *store) claim(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return false, err
	}
	claimed, err := s.d.Claim(ctx, tx, dialect.ClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: state})
	if err != nil {
		return false, s.wrap("claim", consumer, id, err)
	}
	return claimed, nil
}

// claimFresh claims (consumer, id) in a subscriber's transaction after the claim's check of the consumer's id failed
// there (errStaleConsumer): that transaction's snapshot may be older than the consumer's registration, so its check
// cannot tell a stale id from one registered since. The transaction is rolled back to the savepoint set before the
// claim, the id is asked for again in a transaction of its own, and the claim trusts it (dialect.ClaimParams.Fresh).
func (s *store) claimFresh(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	if err := s.d.Savepoint(ctx, tx, dialect.RollbackSavepoint); err != nil {
		return false, fmt.Errorf("inbox: claim %s/%s: roll back to the savepoint after a stale consumer id: %w", consumer, id, err)
	}
	cid, err := s.consumerID(ctx, consumer) // wrap forgot the ids: this registers the name again
	if err != nil {
		return false, err
	}
	claimed, err := s.d.Claim(ctx, tx, dialect.ClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: state, Fresh: true})
	if err != nil {
		return false, s.wrap("claim", consumer, id, err)
	}
	return claimed, nil
}

// ClaimBatch claims a batch's sorted, distinct ids of consumer in tx as applied, 'done', in one statement where
// the dialect can, and returns the ones tx now owns. It and the methods below, to SaveProduced, are the batch
// engine's statements (batch.Store), classified as they are without batching.
func (s *store) ClaimBatch(ctx context.Context, tx driver.Tx, consumer string, ids []string) ([]string, error) {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return nil, err
	}
	claimed, err := s.d.ClaimBatch(ctx, tx, dialect.ClaimBatchParams{Table: s.table, Consumer: consumer, ConsumerID: cid, IDs: ids, State: stateDone})
	if err != nil {
		return nil, s.wrap("batch claim", consumer, fmt.Sprintf("(%d IDs)", len(ids)), err)
	}
	return claimed, nil
}

// Unclaim deletes the row tx claimed for (consumer, id) and has not committed: a batch's member gives its claim back.
func (s *store) Unclaim(ctx context.Context, tx driver.Tx, consumer, id string) error {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return err
	}
	if err := s.d.Unclaim(ctx, tx, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id}); err != nil {
		return s.wrap("give back claim", consumer, id, err)
	}
	return nil
}

// produced returns the state of (consumer, id) and the messages the handler produced when it applied it, if any
// were stored.
func (s *store) produced(ctx context.Context, q driver.Executor, consumer, id string) (state string, msgs []*message.Message, err error) {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return "", nil, err
	}
	state, raw, err := s.d.ReadRow(ctx, q, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id})
	if err != nil {
		return "", nil, s.wrap("read produced messages", consumer, id, err)
	}
	msgs, err = decodeProduced(consumer, id, raw)
	return state, msgs, err
}

// Holds reports whether tx still has the row of (consumer, id) that it claimed. A batch asks after a member's
// statement failed; an error is then most often the transaction's own: it can no longer run statements.
func (s *store) Holds(ctx context.Context, tx driver.Tx, consumer, id string) (bool, error) {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return false, err
	}
	_, _, err = s.d.ReadRow(ctx, tx, dialect.RowParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id})
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// committed reads what produced does, in a short transaction of its own on db: outside the snapshot of a caller's
// REPEATABLE READ transaction.
func (s *store) committed(ctx context.Context, pool driver.Pool, consumer, id string) (state string, msgs []*message.Message, err error) {
	err = inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		state, msgs, err = s.produced(ctx, tx, consumer, id)
		return err
	})
	return state, msgs, err
}

// saveProduced stores the produced column raw (from encodeProduced) for the row claimed in tx. In a transaction
// the inbox commits, the row is 'done' from its claim and a separate statement is safe; a claim made 'applying' is
// finished by finish instead, which stores them in the same statement.
func (s *store) saveProduced(ctx context.Context, tx driver.Tx, consumer, id string, raw []byte) error {
	if raw == nil {
		return nil
	}
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return err
	}
	err = s.d.SaveProduced(ctx, tx, dialect.ProducedParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Produced: raw})
	if err != nil {
		return s.wrapProduced("store produced messages", consumer, id, err)
	}
	return nil
}

// finish turns an 'applying' claim 'done' and stores raw with it, in one statement.
func (s *store) finish(ctx context.Context, tx driver.Tx, consumer, id string, raw []byte) error {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return err
	}
	ok, err := s.d.Finish(ctx, tx, dialect.ProducedParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Produced: raw})
	if err != nil {
		return s.wrapProduced("finish claim", consumer, id, err)
	}
	if !ok {
		return fmt.Errorf("inbox: finish claim %s/%s: the claim is no longer 'applying' in this transaction", consumer, id)
	}
	return nil
}

// takeOver claims, in tx, a row that lease mode left free: 'released' by a failed attempt, or 'processing' with a
// lease that ran out. It reports false when the row is held by a live lease, or finished, by now.
func (s *store) takeOver(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return false, err
	}
	took, err := s.d.TakeOver(ctx, tx, dialect.ClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: state})
	if err != nil {
		return false, s.wrap("take over lease-mode row", consumer, id, err)
	}
	return took, nil
}

// Savepoint runs one step of the savepoint around a claim in a subscriber's transaction, or a batch's member.
func (s *store) Savepoint(ctx context.Context, tx driver.Tx, step dialect.SavepointStep) error {
	return s.d.Savepoint(ctx, tx, step)
}

var _ batch.Store = (*store)(nil)

// ReadFinished returns the rows of consumer and ids that are 'done' or 'failed', by ID, when the dialect reads many
// in one statement (ok is false when it does not): a batch's member whose row is either ends without a transaction
// of its own; one that lease mode holds or left goes on alone, to take it over or wait.
func (s *store) ReadFinished(ctx context.Context, tx driver.Tx, consumer string, ids []string) (rows map[string]dialect.StoredRow, ok bool, err error) {
	r, ok := s.d.(dialect.RowsReader)
	if !ok {
		return nil, false, nil
	}
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return nil, true, err
	}
	rows, err = r.ReadRows(ctx, tx, dialect.RowsParams{Table: s.table, Consumer: consumer, ConsumerID: cid, IDs: ids})
	if err != nil {
		return nil, true, s.wrap("read rows", consumer, fmt.Sprintf("(%d IDs)", len(ids)), err)
	}
	maps.DeleteFunc(rows, func(_ string, row dialect.StoredRow) bool {
		return row.State != stateDone && row.State != stateFailed
	})
	return rows, true, nil
}

// SaveProduced stores a member's produced messages (saveProduced); ones the database refuses come back unusable,
// which settle dead-letters.
func (s *store) SaveProduced(ctx context.Context, tx driver.Tx, consumer, id string, raw []byte) error {
	err := s.saveProduced(ctx, tx, consumer, id, raw)
	if errors.Is(err, ErrProducedUnstorable) {
		return unusable{err}
	}
	return err
}

// Explain adds poolerHint's advice to a driver error.
func (s *store) Explain(err error) error { return poolerHint(s.d, err) }

// wrapProduced wraps the failure of a statement that stores produced messages. A value the database refuses
// (data exceptions, limits, a check constraint) would be refused on every redelivery too: it becomes
// ErrProducedUnstorable, which the middleware dead-letters instead of running the handler again and again.
func (s *store) wrapProduced(op, consumer, id string, err error) error {
	if k := s.d.Classify(err); k == dialect.IDRefused || k == dialect.ValueRefused {
		return fmt.Errorf("inbox: %s %s/%s: %w: the database refused them: %w", op, consumer, id, ErrProducedUnstorable, err)
	}
	return s.wrap(op, consumer, id, err)
}

// joinsSubscriberTx reports whether the dialect may claim inside a subscriber's transaction, and names it for the
// error when it may not.
func (s *store) joinsSubscriberTx() (ok bool, dialectName string) {
	return s.d.JoinsSubscriberTx(), s.d.Name()
}

// locator returns the dialect's way to tell which database a transaction is on, if it has one.
func (s *store) locator() (dialect.Locator, bool) {
	loc, ok := s.d.(dialect.Locator)
	return loc, ok
}

// inspectSchema compares the table's schema with the shape the inbox needs, in q.
func (s *store) inspectSchema(ctx context.Context, q driver.Executor) (dialect.SchemaReport, error) {
	r, err := s.d.InspectSchema(ctx, q, s.table)
	return r, poolerHint(s.d, err)
}

// conflictError is a statement the database rolled back for a serialization failure: the transaction read a
// snapshot older than a row it had to write. Its text is the error's own.
type conflictError struct{ error }

func (e conflictError) Unwrap() error { return e.error }

// isConflict reports whether err is a conflictError.
func isConflict(err error) bool {
	var c conflictError
	return errors.As(err, &c)
}

// claimAtCommit returns the claim of (consumer, id) in state 'done' as a statement to send with COMMIT
// (WithClaimAtCommit, which New allows only with a dialect that has one), and its arguments.
func (s *store) claimAtCommit(ctx context.Context, consumer, id string) (query string, args []any, err error) {
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return "", nil, err
	}
	query, args = s.d.(dialect.AtCommitClaimer).ClaimAtCommit(dialect.ClaimParams{
		Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, State: stateDone})
	return query, args, nil
}

// errStaleConsumer is a claim that wrote nothing because the consumer's cached id no longer names it: the consumers
// table was made anew. The ids are forgotten by then, and the message can be claimed again at once, with the id
// the name has now.
var errStaleConsumer = errors.New("the consumer's id is no longer its own in the consumers table, which was made anew; the id is asked for again")

// wrap adds the operation and the row to a driver error, and translates the errors callers branch on: "no such
// table" into ErrSchemaMissing, after which every Inbox over the table checks its schema again; a claim's stale
// consumer id into errStaleConsumer, after which this Inbox registers its consumers again; and, in the claims,
// an ID the column cannot hold into ErrInvalidEventID, which the middleware dead-letters instead of nacking it
// forever. Only a claim may blame the ID: it is the first statement to send it, and the consumer name, the one other
// input, was checked before. Any later statement sends an ID the claim accepted, so its refusal is something else.
func (s *store) wrap(op, consumer, id string, err error) error {
	switch s.d.Classify(err) {
	case dialect.NoTable:
		readiness.Lost(s.table)
		s.ids.Clear()
		return fmt.Errorf("inbox: %s %s/%s in table %s: %w: %w", op, consumer, id, s.table, ErrSchemaMissing, err)
	case dialect.IDRefused:
		if op == "claim" || op == "claim lease" {
			return fmt.Errorf("inbox: %s %s/%s: %w: the database refused it: %w", op, consumer, id, ErrInvalidEventID, err)
		}
	case dialect.SerializationFailure:
		return conflictError{fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, err)}
	case dialect.StaleConsumer:
		// Every id is forgotten, not only this consumer's: the table that renumbered one renumbered them all.
		s.ids.Clear()
		return fmt.Errorf("inbox: %s %s/%s: %w: %w", op, consumer, id, errStaleConsumer, err)
	}
	return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, poolerHint(s.d, err))
}

// claimLease claims the lease of (consumer, id) for token, or reports why it cannot: the claim and, when it took
// nothing, the read of the row run in one short transaction of their own (see inShortTx). A claim that found its
// consumer id stale wrote nothing, and goes once more with the id the name has now.
func (s *store) claimLease(ctx context.Context, pool driver.Pool, consumer, id, token string, lease time.Duration, f []byte) (dialect.LeaseClaim, error) {
	c, err := s.claimLeaseOnce(ctx, pool, consumer, id, token, lease, f)
	if errors.Is(err, errStaleConsumer) {
		c, err = s.claimLeaseOnce(ctx, pool, consumer, id, token, lease, f)
	}
	return c, err
}

func (s *store) claimLeaseOnce(ctx context.Context, pool driver.Pool, consumer, id, token string, lease time.Duration, f []byte) (dialect.LeaseClaim, error) {
	var c dialect.LeaseClaim
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return c, err
	}
	err = inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		c, err = s.d.ClaimLease(ctx, tx, dialect.LeaseClaimParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Token: token, Lease: lease})
		if err != nil {
			return s.wrap("claim lease", consumer, id, err)
		}
		if c.Claimed { // the fingerprint commits with the claim, before the call out (WithFingerprint)
			return s.saveFingerprint(ctx, tx, consumer, id, f)
		}
		return nil
	})
	return c, err
}

// leaseOp names one of the lease holder's compare-and-set writes.
type leaseOp int

const (
	extendLease   leaseOp = iota // Arg: the new lease length in ms
	completeLease                // Arg: the produced messages ([]byte, nil for none)
	failLease                    // Arg: the stored error text
	releaseLease                 // Arg: the stored error text
)

// String names the write, for errors and logs.
func (op leaseOp) String() string {
	return [...]string{"extend lease", "complete lease", "mark failed", "release lease"}[op]
}

// leaseStatement returns the dialect's compare-and-set for op.
func (s *store) leaseStatement(op leaseOp) func(context.Context, driver.Executor, dialect.LeaseWriteParams) (bool, error) {
	return [...]func(context.Context, driver.Executor, dialect.LeaseWriteParams) (bool, error){
		s.d.ExtendLease, s.d.CompleteLease, s.d.FailLease, s.d.ReleaseLease}[op]
}

// fenced runs one of the lease's compare-and-set writes in a short transaction of its own, and returns an error
// wrapping ErrLeaseLost only when the compare-and-set matched no row: the lease is no longer the holder's. Any
// other failure is returned as what it is; the write did not happen, and the caller must not take it for a lost
// lease. Only completeLease stores a value that can be refused for itself: the produced messages.
func (s *store) fenced(ctx context.Context, pool driver.Pool, lop leaseOp, consumer, id, token string, arg any) error {
	write, op, stores := s.leaseStatement(lop), lop.String(), lop == completeLease
	var held bool
	cid, err := s.consumerID(ctx, consumer)
	if err != nil {
		return err
	}
	err = inShortTx(ctx, pool, s.d, func(tx driver.Tx) error {
		var err error
		held, err = write(ctx, tx, dialect.LeaseWriteParams{Table: s.table, Consumer: consumer, ConsumerID: cid, ID: id, Token: token, Arg: arg})
		return err
	})
	switch {
	case s.d.Classify(err) == dialect.NoTable:
		return fmt.Errorf("inbox: %s %s/%s in table %s: %w: %w", op, consumer, id, s.table, ErrSchemaMissing, err)
	case err != nil && stores:
		return s.wrapProduced(op, consumer, id, err) // the produced messages are the one value it adds
	case err != nil:
		// Not wrap: the row exists, so a value the database refuses here is no fault of the event ID.
		return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, err)
	case !held:
		return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, ErrLeaseLost)
	}
	return nil
}
