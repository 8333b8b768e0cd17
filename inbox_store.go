package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/driver"
)

// store holds every query the middleware runs against the inbox table. The table name is validated by
// config.validate and fixed at construction, so each query is formatted once, not per message.
type store struct {
	table       string
	claimSQL    string
	producedSQL string
	saveSQL     string
	finishSQL   string
	takeoverSQL string

	leaseClaimSQL    string
	leaseStateSQL    string
	leaseExtendSQL   string
	leaseReleaseSQL  string
	leaseCompleteSQL string
	leaseFailSQL     string
}

// Savepoint statements, for a claim made inside watermill-sql's subscriber transaction. The name is fixed: a
// savepoint is always released, after a rollback to it too, so they never nest.
const (
	savepointSQL         = `SAVEPOINT watermill_inbox_claim`
	rollbackSavepointSQL = `ROLLBACK TO SAVEPOINT watermill_inbox_claim`
	releaseSavepointSQL  = `RELEASE SAVEPOINT watermill_inbox_claim`
)

func newStore(table string) *store {
	q := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	return &store{
		table: table,

		// The claim is the whole deduplication. The primary key (consumer, message_id) makes a second INSERT of
		// the same ID wait for the first transaction to end, then do nothing if it committed: racing copies are
		// serialized by the index, with no lock of ours. RETURNING tells the caller, in the same round trip,
		// whether this transaction owns the row. processed_at comes from the column default, the database clock.
		// state is 'done' in the inbox's own transaction; 'applying' inside a transaction it does not commit
		// (migrations/003_applying_guard.up.sql says why).
		claimSQL: q(`INSERT INTO {table} (consumer, message_id, state) VALUES ($1, $2, $3)
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING true`),

		// Runs only on a duplicate, which is rare, so the claim above stays one statement. A new statement takes a
		// new snapshot under READ COMMITTED, so it sees the rows whose commit made the claim do nothing. The state
		// tells a finished message from one that lease mode claimed and has not finished, when a consumer's
		// table saw both modes.
		producedSQL: q(`SELECT i.state, p.produced FROM {table} i
			LEFT JOIN {table}_produced p ON p.consumer = i.consumer AND p.message_id = i.message_id
			WHERE i.consumer = $1 AND i.message_id = $2`),

		// Runs in the claim's transaction, only when the handler produced messages: they commit with the effect
		// they describe, and can be sent again when the router's publish after the commit fails.
		saveSQL: q(`INSERT INTO {table}_produced (consumer, message_id, produced) VALUES ($1, $2, $3)`),

		// Runs only for a claim made 'applying' in a transaction the inbox does not commit, once the handler
		// succeeded (migrations/003_applying_guard.up.sql says why). Turning the row 'done' and storing the produced
		// messages ($3, NULL for none) is one statement: the owner of the transaction may commit it at any moment
		// (watermill-sql's subscriber does on close and at its ack deadline), and a commit between two statements
		// would leave a 'done' row whose messages a redelivery, skipped as a duplicate, could never send. Both parts
		// read the row as it was before the statement, so both see it 'applying' or neither does; the UPDATE's
		// count tells the caller which.
		finishSQL: q(`WITH saved AS (
				INSERT INTO {table}_produced (consumer, message_id, produced)
				SELECT consumer, message_id, $3::jsonb FROM {table}
				WHERE consumer = $1 AND message_id = $2 AND state = 'applying' AND $3::jsonb IS NOT NULL
			)
			UPDATE {table} SET state = 'done' WHERE consumer = $1 AND message_id = $2 AND state = 'applying'`),

		// Runs only when a transaction-mode claim found a row that lease mode left: a consumer switched modes,
		// or shares a table with a lease-mode handler of the same name. It takes the row, as $3, when lease mode
		// would let a new holder take it: 'released', or 'processing' with a lease run out by the database clock.
		// Under READ COMMITTED a concurrent lease claim makes this UPDATE wait and recheck the row's newest version,
		// so only one of them gets it. Clearing the token fences off the old holder's writes.
		takeoverSQL: q(`UPDATE {table} SET state = $3, locked_until = NULL, lease_token = NULL, processed_at = now()
			WHERE consumer = $1 AND message_id = $2
				AND (state = 'released' OR (state = 'processing' AND locked_until <= now()))
			RETURNING true`),

		// Lease mode's claim, committed in a short transaction of its own so the claim is durable before the
		// handler calls out. A new ID is inserted as 'processing'. An existing row is taken only when it is free: 'released' by a
		// failed attempt, or 'processing' with a lease that has run out by the database clock, so consumers with
		// skewed clocks agree on who holds it. The conflict path locks the row, so two takers are serialized and
		// the second finds the first's live lease. The subquery reads the statement's snapshot, the row as it was
		// before this statement: 'processing' there means a holder's lease expired and this is a takeover.
		leaseClaimSQL: q(`INSERT INTO {table} AS t (consumer, message_id, state, attempts, lease_token, locked_until)
			VALUES ($1, $2, 'processing', 1, $3, now() + $4 * interval '1 millisecond')
			ON CONFLICT (consumer, message_id) DO UPDATE SET
				state        = 'processing',
				attempts     = coalesce(t.attempts, 0) + 1,
				lease_token  = excluded.lease_token,
				locked_until = excluded.locked_until,
				processed_at = now(),
				last_error   = CASE WHEN t.state = 'processing'
					THEN 'lease of attempt ' || t.attempts || ' expired' ELSE t.last_error END
			WHERE t.state = 'released' OR (t.state = 'processing' AND t.locked_until <= now())
			RETURNING attempts, coalesce(last_error, ''),
				(SELECT p.state = 'processing' FROM {table} p WHERE p.consumer = $1 AND p.message_id = $2)`),

		// Runs only when the claim returned no row, to tell a finished message from a live lease. Milliseconds
		// left are computed by the database, whose clock the lease is on.
		// The produced messages come along for the 'done' case, so a duplicate costs this one extra round trip.
		leaseStateSQL: q(`SELECT i.state, coalesce(i.attempts, 0),
				greatest(0, extract(epoch FROM i.locked_until - now()) * 1000)::bigint, p.produced
			FROM {table} i
			LEFT JOIN {table}_produced p ON p.consumer = i.consumer AND p.message_id = i.message_id
			WHERE i.consumer = $1 AND i.message_id = $2`),

		// Every write of a holder is a compare-and-set on its lease token and the 'processing' state: once the
		// lease was taken over, the old holder's write matches no row, returns none, and it learns that it lost
		// the lease.
		leaseExtendSQL: q(`UPDATE {table} SET locked_until = now() + $4 * interval '1 millisecond'
			WHERE consumer = $1 AND message_id = $2 AND lease_token = $3 AND state = 'processing'
			RETURNING 1`),
		leaseReleaseSQL: q(`UPDATE {table} SET state = 'released', locked_until = NULL, last_error = $4, processed_at = now()
			WHERE consumer = $1 AND message_id = $2 AND lease_token = $3 AND state = 'processing'
			RETURNING 1`),
		// Marks 'done' and stores the produced messages, if any, in one statement: a crash cannot leave a 'done'
		// row whose messages were never stored, which a redelivery would then skip without sending them.
		leaseCompleteSQL: q(`WITH done AS (
				UPDATE {table} SET state = 'done', locked_until = NULL, processed_at = now()
				WHERE consumer = $1 AND message_id = $2 AND lease_token = $3 AND state = 'processing'
				RETURNING consumer, message_id
			), saved AS (
				INSERT INTO {table}_produced (consumer, message_id, produced)
				SELECT consumer, message_id, $4::jsonb FROM done WHERE $4::jsonb IS NOT NULL
			)
			SELECT 1 FROM done`),
		leaseFailSQL: q(`UPDATE {table} SET state = 'failed', locked_until = NULL, last_error = $4, processed_at = now()
			WHERE consumer = $1 AND message_id = $2 AND lease_token = $3 AND state = 'processing'
			RETURNING 1`),
	}
}

// claim inserts the row for (consumer, id) in tx, in state, and reports whether tx now owns it. false means the
// message was applied before, by a transaction that committed.
func (s *store) claim(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	var claimed bool
	err := tx.QueryRow(ctx, s.claimSQL, consumer, id, state).Scan(&claimed)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		return false, nil
	case err != nil:
		return false, s.wrap("claim", consumer, id, err)
	}
	return true, nil
}

// produced returns the state of (consumer, id) and the messages the handler produced when it applied it, if any
// were stored.
func (s *store) produced(ctx context.Context, q driver.Executor, consumer, id string) (state string, msgs []*message.Message, err error) {
	var raw []byte
	err = q.QueryRow(ctx, s.producedSQL, consumer, id).Scan(&state, &raw)
	if err != nil {
		return "", nil, s.wrap("read produced messages", consumer, id, err)
	}
	msgs, err = decodeProduced(consumer, id, raw)
	return state, msgs, err
}

// committed reads what produced does, in a short transaction of its own on db: outside the snapshot of a caller's
// REPEATABLE READ transaction.
func (s *store) committed(ctx context.Context, pool driver.Pool, consumer, id string) (state string, msgs []*message.Message, err error) {
	err = inShortTx(ctx, pool, func(tx driver.Tx) error {
		state, msgs, err = s.produced(ctx, tx, consumer, id)
		return err
	})
	return state, msgs, err
}

// saveProduced stores the produced column raw (from encodeProduced) for the row claimed in tx. In a transaction
// the inbox commits, the row is 'done' from its claim and a separate statement is safe; a claim made 'applying' is
// finished by finish instead, which stores them in the same statement.
func (s *store) saveProduced(ctx context.Context, tx driver.Tx, consumer, id string, raw any) error {
	if raw == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, s.saveSQL, consumer, id, raw); err != nil {
		return s.wrapProduced("store produced messages", consumer, id, err)
	}
	return nil
}

// finish turns an 'applying' claim 'done' and stores raw with it, in one statement.
func (s *store) finish(ctx context.Context, tx driver.Tx, consumer, id string, raw any) error {
	n, err := tx.Exec(ctx, s.finishSQL, consumer, id, raw)
	if err != nil {
		return s.wrapProduced("finish claim", consumer, id, err)
	}
	if n != 1 {
		return fmt.Errorf("inbox: finish claim %s/%s: the claim is no longer 'applying' in this transaction", consumer, id)
	}
	return nil
}

// takeOver claims, in tx, a row that lease mode left free: 'released' by a failed attempt, or 'processing' with a
// lease that ran out. It reports false when the row is held by a live lease, or finished, by now.
func (s *store) takeOver(ctx context.Context, tx driver.Tx, consumer, id, state string) (bool, error) {
	var took bool
	err := tx.QueryRow(ctx, s.takeoverSQL, consumer, id, state).Scan(&took)
	switch {
	case errors.Is(err, driver.ErrNoRows):
		return false, nil
	case err != nil:
		return false, s.wrap("take over lease-mode row", consumer, id, err)
	}
	return true, nil
}

// wrapProduced wraps the failure of a statement that stores produced messages. A value the database refuses
// (data exceptions, limits, a check constraint) would be refused on every redelivery too: it becomes
// ErrProducedUnstorable, which the middleware dead-letters instead of running the handler again and again.
func (s *store) wrapProduced(op, consumer, id string, err error) error {
	state := sqlState(err)
	if strings.HasPrefix(state, "22") || strings.HasPrefix(state, "54") || state == "23514" {
		return fmt.Errorf("inbox: %s %s/%s: %w: the database refused them: %w", op, consumer, id, ErrProducedUnstorable, err)
	}
	return s.wrap(op, consumer, id, err)
}

// wrap adds the operation and the row to a driver error, and translates the errors callers branch on: "no such
// table" into ErrSchemaMissing, after which every Inbox over the table checks its schema again; and, in the claims,
// an ID the column cannot hold into ErrInvalidEventID, which the middleware dead-letters instead of nacking it
// forever. Only a claim may blame the ID: it is the first statement to send it, and the consumer name, the one other
// input, was checked before. Any later statement sends an ID the claim accepted, so its refusal is something else.
func (s *store) wrap(op, consumer, id string, err error) error {
	code := sqlState(err)
	switch {
	case code == "42P01": // undefined_table
		noteSchemaLost(s.table)
		return fmt.Errorf("inbox: %s %s/%s in table %s: %w: %w", op, consumer, id, s.table, ErrSchemaMissing, err)
	case (op == "claim" || op == "claim lease") &&
		// invalid_text_representation (a uuid column), character_not_in_repertoire, program_limit_exceeded (index row size)
		(code == "22P02" || code == "22021" || code == "54000"):
		return fmt.Errorf("inbox: %s %s/%s: %w: the database refused it: %w", op, consumer, id, ErrInvalidEventID, err)
	}
	return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, err)
}

// sqlState returns the SQLSTATE code of a PostgreSQL error from any driver that exposes one (lib/pq's *pq.Error
// and pgx's *pgconn.PgError both do), or "" for other errors.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}

// leaseClaim is the outcome of a lease-mode claim.
type leaseClaim struct {
	claimed   bool   // the caller now holds the lease
	attempt   int    // claims so far, this one included
	lastError string // why the previous attempt ended, if one did
	takeover  bool   // the previous holder's lease had expired
	// Set when claimed is false:
	state     string        // the row's state
	remaining time.Duration // what is left of a live lease
	produced  []byte        // the produced column of a 'done' row
}

// claimLease claims the lease of (consumer, id) for token, or reports why it cannot: the claim and, when it took
// nothing, the read of the row run in one short transaction of their own (see inShortTx).
func (s *store) claimLease(ctx context.Context, pool driver.Pool, consumer, id, token string, lease time.Duration) (leaseClaim, error) {
	var c leaseClaim
	err := inShortTx(ctx, pool, func(tx driver.Tx) error {
		c = leaseClaim{}
		var takeover sql.NullBool
		err := tx.QueryRow(ctx, s.leaseClaimSQL, consumer, id, token, lease.Milliseconds()).Scan(&c.attempt, &c.lastError, &takeover)
		if err == nil {
			c.claimed, c.takeover = true, takeover.Bool
			return nil
		}
		if !errors.Is(err, driver.ErrNoRows) {
			return s.wrap("claim lease", consumer, id, err)
		}
		var remainingMS int64
		err = tx.QueryRow(ctx, s.leaseStateSQL, consumer, id).Scan(&c.state, &c.attempt, &remainingMS, &c.produced)
		if err != nil {
			return s.wrap("read lease", consumer, id, err)
		}
		c.remaining = time.Duration(remainingMS) * time.Millisecond
		return nil
	})
	return c, err
}

// fenced runs one of the lease's compare-and-set writes in a short transaction of its own, and returns an error
// wrapping ErrLeaseLost only when the compare-and-set matched no row: the lease is no longer the holder's. Any
// other failure is returned as what it is; the write did not happen, and the caller must not take it for a lost
// lease.
func (s *store) fenced(ctx context.Context, pool driver.Pool, query, op, consumer, id, token string, arg any) error {
	err := inShortTx(ctx, pool, func(tx driver.Tx) error {
		var one int
		return tx.QueryRow(ctx, query, consumer, id, token, arg).Scan(&one)
	})
	switch {
	case errors.Is(err, driver.ErrNoRows):
		return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, ErrLeaseLost)
	case sqlState(err) == "42P01": // undefined_table
		return fmt.Errorf("inbox: %s %s/%s in table %s: %w: %w", op, consumer, id, s.table, ErrSchemaMissing, err)
	case err != nil && query == s.leaseCompleteSQL:
		return s.wrapProduced(op, consumer, id, err) // the produced messages are the one value it adds
	case err != nil:
		// Not wrap: the row exists, so a value the database refuses here is no fault of the event ID.
		return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, err)
	}
	return nil
}
