package pgxinbox

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	inbox "github.com/effectively-once/watermill-inbox"
)

// Savepoints of batch members whose first statements go in one pipeline (see the inbox's
// internal/batch/pipeline.go), one name per seat in the batch, so that a rollback reaches one member's. The names
// are few and fixed: in the statement cache, each is prepared once per connection.
const memberSavepointPrefix = "inbox_member_"

var memberSavepointSQL, memberRollbackSQL = func() (set, rollback [inbox.MaxBatchSize + 1]string) {
	for seat := range set {
		set[seat] = "savepoint " + memberSavepointPrefix + strconv.Itoa(seat)
		rollback[seat] = "rollback to savepoint " + memberSavepointPrefix + strconv.Itoa(seat)
	}
	return set, rollback
}()

func memberSavepoint(seat int, names *[inbox.MaxBatchSize + 1]string, verb string) string {
	if seat >= 0 && seat < len(names) {
		return names[seat]
	}
	return verb + memberSavepointPrefix + strconv.Itoa(seat)
}

// execPipelined runs, in one batch, for each k the savepoint of seats[k] and then sqls[k] with args[k], and reads
// their answers: see inbox's pipeliner. A statement's PostgreSQL error is its own; the batch's other errors (one
// of a savepoint, a broken connection) are returned.
func (t *deferredTx) execPipelined(ctx context.Context, seats []int, sqls []string, args [][]any, results []any, errs []error) (set int, err error) {
	if err := t.ensureBegun(ctx); err != nil {
		return 0, err
	}
	t.piped = slices.Grow(t.piped[:0], 2*len(sqls))[:2*len(sqls)]
	t.pipe.QueuedQueries = t.pipe.QueuedQueries[:0]
	for k := range sqls {
		t.piped[2*k] = pgx.QueuedQuery{SQL: memberSavepoint(seats[k], &memberSavepointSQL, "savepoint ")}
		t.piped[2*k+1] = pgx.QueuedQuery{SQL: sqls[k], Arguments: args[k]}
		t.pipe.QueuedQueries = append(t.pipe.QueuedQueries, &t.piped[2*k], &t.piped[2*k+1])
	}
	br := t.conn.SendBatch(ctx, &t.pipe)
	for k := range sqls {
		if _, err = br.Exec(); err != nil {
			break
		}
		set++
		var tag pgconn.CommandTag
		tag, errs[k] = br.Exec()
		results[k] = tag
		if errs[k] != nil {
			if pgErr := (*pgconn.PgError)(nil); !errors.As(errs[k], &pgErr) {
				err = errs[k]
			}
			break
		}
	}
	cerr := br.Close() // after a statement's error, that error again
	if err == nil && (set == 0 || errs[set-1] == nil) && cerr != nil {
		err = cerr
	}
	clear(t.pipe.QueuedQueries)
	clear(t.piped)
	return set, err
}

// rollbackToSeat rolls back to the newest savepoint of seat.
func (t *deferredTx) rollbackToSeat(ctx context.Context, seat int) error {
	_, err := t.conn.Exec(ctx, memberSavepoint(seat, &memberRollbackSQL, "rollback to savepoint "))
	return err
}
