package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// The claim and the statements around it, on every message's path.
const (
	// The claim is the whole deduplication. The primary key (message_id, consumer_id) makes a second INSERT of
	// the same ID wait for the first transaction to end, then do nothing if it committed: racing copies are
	// serialized by the index, with no lock of ours. RETURNING tells the caller, in the same round trip,
	// whether this transaction owns the row. processed_at comes from the column default, the database clock.
	// state is 'd' (done) in the inbox's own transaction; 'a' (applying) inside a transaction it does not
	// commit (migrations/003_applying_guard.up.sql says why). States travel as text and are cast: not every
	// driver writes PostgreSQL's one-byte "char".
	//
	// The consumer's id ($1) is one the process cached, and the consumers table may have been made anew since
	// (migration 007 rolled back and applied again numbers the consumers in the order of their names), so the
	// row takes its consumer_id from the consumers table, where the id must still name the consumer ($4). A
	// stale id gives NULL, and the NOT NULL of consumer_id fails the statement (not_null_violation, which
	// Classify calls StaleConsumer) before ON CONFLICT looks for a row: a stale id can never find another
	// consumer's row and take it for a duplicate. The check is a probe of the consumers table's primary key
	// in the same round trip. The statement's locks on both tables last until the transaction ends, and the
	// migrations lock the inbox table before they touch either, so the id stays checked for every statement
	// after the claim in its transaction.
	claimSQL = `INSERT INTO {table} (consumer_id, message_id, state)
		VALUES ((SELECT id / {utf8} FROM {table}_consumers WHERE id = $1 AND name = $4), $2, $3::text::"char")
		ON CONFLICT (message_id, consumer_id) DO NOTHING
		RETURNING true`

	// The claim above without its check, for a claim in a subscriber's transaction whose check failed only
	// because the transaction's snapshot, under REPEATABLE READ, is older than the consumer's registration (a
	// consumer's first message, or the first after the consumers table was made anew), and cannot see its row.
	// The id was read again just before, by a transaction that committed (dialect.ClaimParams.Fresh); the
	// consumers table could be made anew between that read and this INSERT only by a migration that took the
	// inbox table's lock and committed within that one round trip, where before the check every claim trusted
	// an id for as long as the process ran.
	claimFreshSQL = `INSERT INTO {table} (consumer_id, message_id, state) VALUES ($1 / {utf8}, $2, $3::text::"char")
		ON CONFLICT (message_id, consumer_id) DO NOTHING
		RETURNING true`

	// The claim at commit (WithClaimAtCommit) goes in one round trip with COMMIT, after the handler ran, so
	// it must not do nothing on a row already there: it fails, with a unique violation, the COMMIT after it
	// does not run, and the handler's effect is rolled back with the transaction. A racing copy's INSERT waits
	// for the first one's transaction as the claim above does, and fails if that one commits. The consumer's
	// id is checked as in the claim above: a stale one fails the INSERT, and the message goes the usual way,
	// where its claim finds the id stale again, forgets it and registers the name anew.
	claimAtCommitSQL = `INSERT INTO {table} (consumer_id, message_id, state)
		VALUES ((SELECT id / {utf8} FROM {table}_consumers WHERE id = $1 AND name = $3), $2, 'd')`

	// Runs only in batch mode, for a message whose handler failed, on the row the batch claimed for it and has
	// not committed: the other messages of the batch commit, and its redelivery must find no row. Its id was
	// checked by the batch's claim, in this transaction.
	unclaimSQL = `DELETE FROM {table} WHERE message_id = $2 AND consumer_id = $1`

	// Runs only on a duplicate, which is rare, so the claim above stays one statement. A new statement takes a
	// new snapshot under READ COMMITTED, so it sees the rows whose commit made the claim do nothing. The state
	// tells a finished message from one that lease mode claimed and has not finished, when a consumer's
	// table saw both modes. It trusts the consumer's id without checking it again: it runs after the claim,
	// in the claim's transaction, and the claim checked the id and holds the locks that keep the consumers
	// table from being made anew until the transaction ends (claimSQL says why). The claim that inserted
	// nothing inserted nothing because it found a row, not because of a stale id, which fails it. The one
	// read in a transaction of its own (a subscriber's claim that met a row committed after its snapshot)
	// runs while the subscriber's transaction, whose claim checked the id, still holds those locks.
	producedSQL = `SELECT i.state::text, p.produced FROM {table} i
		LEFT JOIN {table}_produced p ON p.message_id = i.message_id AND p.consumer_id = i.consumer_id
		WHERE i.message_id = $2 AND i.consumer_id = $1`

	// Runs in the claim's transaction, only when the handler produced messages: they commit with the effect
	// they describe, and can be sent again when the router's publish after the commit fails. The produced
	// table has no foreign key to the inbox (007 says why), so a row deleted by hand may have left its
	// produced messages behind: the claim that follows replaces them rather than failing on them.
	saveSQL = `INSERT INTO {table}_produced (message_id, consumer_id, produced)
		VALUES ({id}, $1 / {utf8}, convert_from($3::bytea, 'UTF8')::jsonb)
		ON CONFLICT (message_id, consumer_id) DO UPDATE SET produced = excluded.produced`

	// Runs only for a claim made 'applying' in a transaction the inbox does not commit, once the handler
	// succeeded (migrations/003_applying_guard.up.sql says why). Turning the row 'done' and storing the produced
	// messages ($3, NULL for none) is one statement: the owner of the transaction may commit it at any moment
	// (watermill-sql's subscriber does on close and at its ack deadline), and a commit between two statements
	// would leave a 'done' row whose messages a redelivery, skipped as a duplicate, could never send. Both parts
	// read the row as it was before the statement, so both see it 'applying' or neither does; the UPDATE's
	// count tells the caller which.
	finishSQL = `WITH saved AS (
			INSERT INTO {table}_produced (message_id, consumer_id, produced)
			SELECT message_id, consumer_id, convert_from($3::bytea, 'UTF8')::jsonb FROM {table}
			WHERE message_id = {id} AND consumer_id = $1 AND state = 'a' AND $3::bytea IS NOT NULL
			ON CONFLICT (message_id, consumer_id) DO UPDATE SET produced = excluded.produced
		)
		UPDATE {table} SET state = 'd' WHERE message_id = {id} AND consumer_id = $1 / {utf8} AND state = 'a'`

	// Runs only when a transaction-mode claim found a row that lease mode left: a consumer switched modes,
	// or shares a table with a lease-mode handler of the same name. It takes the row, as $3, when lease mode
	// would let a new holder take it: 'released', or 'processing' with a lease run out by the database clock.
	// Under READ COMMITTED a concurrent lease claim makes this UPDATE wait and recheck the row's newest version,
	// so only one of them gets it. Clearing the token fences off the old holder's writes. It leaves consumer_id
	// as it is, and runs after the claim, in its transaction, which checked the consumer's id.
	takeoverSQL = `UPDATE {table} SET state = $3::text::"char", locked_until = NULL, lease_token = NULL,
			processed_at = {now_minutes}
		WHERE message_id = $2 AND consumer_id = $1
			AND (state = 'r' OR (state = 'p' AND locked_until <= now()))
		RETURNING true`
)

// The claim and the read of many messages, for batch mode (ClaimBatch and ReadRows say why they have their
// shape). {rows} and {ids} stand for a list built once per table and number of IDs.
const (
	claimBatchSQL = `WITH checked AS (SELECT id / {utf8} AS id FROM {table}_consumers WHERE id = $1 AND name = $3)
		INSERT INTO {table} (consumer_id, message_id, state) VALUES {rows}
		ON CONFLICT (message_id, consumer_id) DO NOTHING RETURNING message_id::text`
	claimBatchFirst = `((SELECT id FROM checked), $4, $2::text::"char")`
	claimBatchRow   = `($1, $%d, $2::text::"char")`

	readRowsSQL = `SELECT i.message_id::text, i.state::text, p.produced FROM {table} i
		LEFT JOIN {table}_produced p ON p.message_id = i.message_id AND p.consumer_id = i.consumer_id
		WHERE i.consumer_id = $1 AND i.message_id IN ({ids})`
)

// Savepoint statements, for a claim made inside watermill-sql's subscriber transaction. The name is fixed: a
// savepoint is always released, after a rollback to it too, so they never nest.
const (
	savepointSQL         = `SAVEPOINT watermill_inbox_claim`
	rollbackSavepointSQL = `ROLLBACK TO SAVEPOINT watermill_inbox_claim`
	releaseSavepointSQL  = `RELEASE SAVEPOINT watermill_inbox_claim`
)

func (pg *postgres) Claim(ctx context.Context, tx driver.Executor, p dialect.ClaimParams) (bool, error) {
	if p.Fresh { // never the first statement of its transaction, so never prepared
		return scanTrue(tx.QueryRow(ctx, pg.sql(claimFreshSQL, p.Table), p.ConsumerID, p.ID, stateCode(p.State)))
	}
	return scanTrue(tx.QueryRow(ctx, pg.sql(claimSQL, p.Table), p.ConsumerID, p.ID, stateCode(p.State), p.Consumer))
}

// ClaimAtCommit returns the claim as a plain INSERT, for COMMIT to follow in the same round trip.
func (pg *postgres) ClaimAtCommit(p dialect.ClaimParams) (string, []any) {
	return pg.sql(claimAtCommitSQL, p.Table), []any{p.ConsumerID, p.ID, p.Consumer}
}

// batchKey names the batch claim of one table for one number of IDs.
type batchKey struct {
	table string
	n     int
}

// ClaimBatch is the claim above for many IDs in one statement: one round trip and one index descent per ID
// instead of one statement each. The IDs arrive sorted, and the rows are inserted in the order of the VALUES
// list, so two batches that share IDs take their locks in one order. Each ID is its own parameter, so that the
// statement is the same for every driver (no array types); its text is built once per table and size.
// RETURNING spells the IDs as text, which for a uuid column is the canonical form the inbox already uses.
//
// The consumer's id is checked once, in checked, as claimSQL checks it, and the first row takes its consumer_id
// from there: a stale id gives it NULL, whose NOT NULL violation fails the whole statement, so that no row of a
// stale id is kept nor any conflict of one reported. The other rows take the id as it is: one subquery, where one
// per row cost a plan of the statement's size at every batch (the statement goes with its values as literals,
// unprepared). The rows stay a VALUES list of the INSERT,
// so that each ID parameter takes message_id's type (text or uuid) as in claimSQL; a SELECT from a VALUES list
// would make them text, which a uuid column does not take. The read of the rows the claim found (ReadRows) runs
// after it in its transaction, and trusts the id.
func (pg *postgres) ClaimBatch(ctx context.Context, tx driver.Executor, p dialect.ClaimBatchParams) ([]string, error) {
	key := batchKey{p.Table, len(p.IDs)}
	query, ok := pg.batches.Load(key)
	if !ok {
		rows := commaList(len(p.IDs), func(k int) string {
			if k == 0 {
				return claimBatchFirst
			}
			return fmt.Sprintf(claimBatchRow, k+4)
		})
		query, _ = pg.batches.LoadOrStore(key, strings.Replace(pg.sql(claimBatchSQL, p.Table), "{rows}", rows, 1))
	}
	args := make([]any, 0, len(p.IDs)+3)
	args = append(args, p.ConsumerID, stateCode(p.State), p.Consumer)
	for _, id := range p.IDs {
		args = append(args, id)
	}
	claimed := make([]string, 0, len(p.IDs))
	var id string
	dest := []any{&id} // one destination for every row: a row costs its ID's string only
	err := dialect.ScanRows(ctx, tx, query.(string), args, func(r driver.Rows) error {
		err := r.Scan(dest...)
		claimed = append(claimed, id)
		return err
	})
	return claimed, err
}

// ReadRows is ReadRow for many IDs in one statement: one round trip and one index probe per ID. Batch mode runs it
// only when its claim found rows there already, for those IDs; in a burst of redelivered copies that is every
// message of the batch, which would otherwise each begin a transaction, claim again and read alone. Each ID is its
// own parameter, as in ClaimBatch, and the text is built once per table and count. It trusts the consumer's id
// as producedSQL does: it runs in the batch's transaction after ClaimBatch, which checked the id.
func (pg *postgres) ReadRows(ctx context.Context, q driver.Executor, p dialect.RowsParams) (map[string]dialect.StoredRow, error) {
	key := batchKey{p.Table, len(p.IDs)}
	query, ok := pg.reads.Load(key)
	if !ok {
		ids := commaList(len(p.IDs), func(k int) string { return "$" + strconv.Itoa(k+2) })
		query, _ = pg.reads.LoadOrStore(key, strings.Replace(pg.sql(readRowsSQL, p.Table), "{ids}", ids, 1))
	}
	args := make([]any, 0, len(p.IDs)+1)
	args = append(args, p.ConsumerID)
	for _, id := range p.IDs {
		args = append(args, id)
	}
	found := make(map[string]dialect.StoredRow, len(p.IDs))
	err := dialect.ScanRows(ctx, q, query.(string), args, func(r driver.Rows) error {
		var id, state string
		var produced []byte
		err := r.Scan(&id, &state, &produced)
		found[id] = dialect.StoredRow{State: stateName(state), Produced: produced}
		return err
	})
	return found, err
}

// commaList joins item(0) to item(n-1) with commas: the rows or the parameters of a statement built for n IDs.
func commaList(n int, item func(k int) string) string {
	var b strings.Builder
	for k := range n {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(item(k))
	}
	return b.String()
}

func (pg *postgres) Unclaim(ctx context.Context, tx driver.Executor, p dialect.RowParams) error {
	_, err := tx.Exec(ctx, pg.sql(unclaimSQL, p.Table), p.ConsumerID, p.ID)
	return err
}

func (pg *postgres) ReadRow(ctx context.Context, q driver.Executor, p dialect.RowParams) (state string, produced []byte, err error) {
	err = q.QueryRow(ctx, pg.sql(producedSQL, p.Table), p.ConsumerID, p.ID).Scan(&state, &produced)
	return stateName(state), produced, err
}

func (pg *postgres) SaveProduced(ctx context.Context, tx driver.Executor, p dialect.ProducedParams) error {
	query, id := pg.withID(saveSQL, p.Table, p.ID)
	_, err := tx.Exec(ctx, query, p.ConsumerID, id, nullable(p.Produced))
	return err
}

func (pg *postgres) Finish(ctx context.Context, tx driver.Executor, p dialect.ProducedParams) (bool, error) {
	query, id := pg.withID(finishSQL, p.Table, p.ID)
	n, err := tx.Exec(ctx, query, p.ConsumerID, id, nullable(p.Produced))
	return n == 1, err
}

func (pg *postgres) TakeOver(ctx context.Context, tx driver.Executor, p dialect.ClaimParams) (bool, error) {
	return scanTrue(tx.QueryRow(ctx, pg.sql(takeoverSQL, p.Table), p.ConsumerID, p.ID, stateCode(p.State)))
}

func (*postgres) Savepoint(ctx context.Context, tx driver.Executor, step dialect.SavepointStep) error {
	query := savepointSQL
	switch step {
	case dialect.RollbackSavepoint:
		query = rollbackSavepointSQL
	case dialect.ReleaseSavepoint:
		query = releaseSavepointSQL
	}
	_, err := tx.Exec(ctx, query)
	return err
}
