package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Lease mode: a claim committed before the handler runs, and the holder's writes after it.
const (
	// Lease mode's claim, committed in a short transaction of its own so the claim is durable before the
	// handler calls out. A new ID is inserted as 'processing'. An existing row is taken only when it is free:
	// 'released' by a failed attempt, or 'processing' with a lease that has run out by the database clock, so
	// consumers with skewed clocks agree on who holds it. The conflict path locks the row, so two takers are
	// serialized and the second finds the first's live lease.
	//
	// It looks first: prior reads the row as the statement's snapshot has it, and a finished row ('done' or
	// 'failed', the common case of a redelivered copy) inserts nothing, so it meets no conflict. Without that
	// the conflict path would lock the row, and write WAL and commit for it, even though its WHERE leaves the
	// row as it is. prior also tells a takeover: 'processing' there means a holder's lease expired. It names
	// $1 and $2 first, which gives them the columns' types (message_id is text or uuid) for the SELECT list.
	//
	// The consumer's id is checked as in claimSQL: checked holds it only while it still names the consumer
	// ($5). A stale one makes prior find nothing, even where the consumer that now has that id has a finished
	// row, so the INSERT goes ahead with a NULL consumer_id and fails; no stale id is ever taken for a
	// duplicate. The read of the row after a claim that took nothing (leaseStateSQL) runs in the same
	// transaction, after that check.
	leaseClaimSQL = `WITH checked AS (
			SELECT id / {utf8} AS id FROM {table}_consumers WHERE id = $1 AND name = $5
		), prior AS (
			SELECT state FROM {table} WHERE message_id = $2 AND consumer_id = (SELECT id FROM checked)
		)
		INSERT INTO {table} AS t (processed_at, consumer_id, message_id, state, attempts, lease_token, locked_until)
		SELECT {now_minutes}, (SELECT id FROM checked), $2, 'p', 1, $3::uuid, now() + $4 * interval '1 millisecond'
		WHERE NOT EXISTS (SELECT 1 FROM prior WHERE state IN ('d', 'f'))
		ON CONFLICT (message_id, consumer_id) DO UPDATE SET
			state        = 'p',
			attempts     = coalesce(t.attempts, 0) + 1,
			lease_token  = excluded.lease_token,
			locked_until = excluded.locked_until,
			processed_at = excluded.processed_at,
			last_error   = CASE WHEN t.state = 'p'
				THEN 'lease of attempt ' || t.attempts || ' expired' ELSE t.last_error END
		WHERE t.state = 'r' OR (t.state = 'p' AND t.locked_until <= now())
		RETURNING attempts, coalesce(last_error, ''), (SELECT state = 'p' FROM prior)`

	// Runs only when the claim returned no row, to tell a finished message from a live lease, in the claim's
	// transaction, which checked the consumer's id. Milliseconds left are computed by the database, whose
	// clock the lease is on.
	// The produced messages come along for the 'done' case, so a duplicate costs this one extra round trip.
	leaseStateSQL = `SELECT i.state::text, coalesce(i.attempts, 0),
			greatest(0, extract(epoch FROM i.locked_until - now()) * 1000)::bigint, p.produced
		FROM {table} i
		LEFT JOIN {table}_produced p ON p.message_id = i.message_id AND p.consumer_id = i.consumer_id
		WHERE i.message_id = $2 AND i.consumer_id = $1`

	// Every write of a holder is a compare-and-set on its lease token and the 'processing' state: once the
	// lease was taken over, the old holder's write matches no row, returns none, and it learns that it lost
	// the lease.
	leaseExtendSQL = `UPDATE {table} SET locked_until = now() + $4 * interval '1 millisecond'
		WHERE message_id = {id} AND consumer_id = $1 / {utf8} AND lease_token = $3 AND state = 'p'
		RETURNING 1`
	leaseReleaseSQL = `UPDATE {table} SET state = 'r', locked_until = NULL, last_error = convert_from($4::bytea, 'UTF8'),
			processed_at = {now_minutes}
		WHERE message_id = {id} AND consumer_id = $1 / {utf8} AND lease_token = $3 AND state = 'p'
		RETURNING 1`

	// Marks 'done' and stores the produced messages, if any, in one statement: a crash cannot leave a 'done'
	// row whose messages were never stored, which a redelivery would then skip without sending them.
	leaseCompleteSQL = `WITH done AS (
			UPDATE {table} SET state = 'd', locked_until = NULL, processed_at = {now_minutes}
			WHERE message_id = {id} AND consumer_id = $1 / {utf8} AND lease_token = $3 AND state = 'p'
			RETURNING message_id, consumer_id
		), saved AS (
			INSERT INTO {table}_produced (message_id, consumer_id, produced)
			SELECT message_id, consumer_id, convert_from($4::bytea, 'UTF8')::jsonb FROM done WHERE $4::bytea IS NOT NULL
			ON CONFLICT (message_id, consumer_id) DO UPDATE SET produced = excluded.produced
		)
		SELECT 1 FROM done`
	leaseFailSQL = `UPDATE {table} SET state = 'f', locked_until = NULL, last_error = convert_from($4::bytea, 'UTF8'),
			processed_at = {now_minutes}
		WHERE message_id = {id} AND consumer_id = $1 / {utf8} AND lease_token = $3 AND state = 'p'
		RETURNING 1`
)

func (pg *postgres) ClaimLease(ctx context.Context, tx driver.Executor, p dialect.LeaseClaimParams) (dialect.LeaseClaim, error) {
	var c dialect.LeaseClaim
	var takeover sql.NullBool
	err := tx.QueryRow(ctx, pg.sql(leaseClaimSQL, p.Table), p.ConsumerID, p.ID, p.Token, p.Lease.Milliseconds(), p.Consumer).
		Scan(&c.Attempt, &c.LastError, &takeover)
	if err == nil {
		c.Claimed, c.Takeover = true, takeover.Bool
		return c, nil
	}
	if !errors.Is(err, driver.ErrNoRows) {
		return c, err
	}
	var remainingMS int64
	err = tx.QueryRow(ctx, pg.sql(leaseStateSQL, p.Table), p.ConsumerID, p.ID).Scan(&c.State, &c.Attempt, &remainingMS, &c.Produced)
	if err != nil {
		return c, fmt.Errorf("read lease: %w", err)
	}
	c.State = stateName(c.State)
	c.Remaining = time.Duration(remainingMS) * time.Millisecond
	return c, nil
}

func (pg *postgres) ExtendLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return pg.leaseWrite(ctx, tx, leaseExtendSQL, p, p.Arg)
}

func (pg *postgres) ReleaseLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return pg.leaseWrite(ctx, tx, leaseReleaseSQL, p, asBytes(p.Arg))
}

func (pg *postgres) CompleteLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	raw, _ := p.Arg.([]byte)
	return pg.leaseWrite(ctx, tx, leaseCompleteSQL, p, nullable(raw))
}

func (pg *postgres) FailLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	return pg.leaseWrite(ctx, tx, leaseFailSQL, p, asBytes(p.Arg))
}

// leaseWrite runs one of the holder's compare-and-set writes, each of which returns a row when it matched. Each is
// the only statement of its transaction.
func (pg *postgres) leaseWrite(ctx context.Context, tx driver.Executor, template string, p dialect.LeaseWriteParams, arg any) (bool, error) {
	var one int
	query, id := pg.withID(template, p.Table, p.ID)
	err := tx.QueryRow(ctx, query, p.ConsumerID, id, p.Token, arg).Scan(&one)
	if errors.Is(err, driver.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
