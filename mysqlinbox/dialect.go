package mysqlinbox

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Dialect returns a dialect for MySQL 8 and MariaDB 10.11 or later, for inbox.OnDialect; Database uses one. Each
// keeps the statements it writes for the tables it is asked about, so each Database holds its own: nothing is
// shared across the process.
func Dialect() dialect.Dialect { return &mysqlDialect{} }

type mysqlDialect struct {
	queries sync.Map // table name -> *queries
}

func (m *mysqlDialect) sql(table string) *queries {
	if q, ok := m.queries.Load(table); ok {
		return q.(*queries)
	}
	q, _ := m.queries.LoadOrStore(table, newQueries(table))
	return q.(*queries)
}

// errNoJoin is what the joined transaction's operations return: the inbox refuses to be built with a way to join
// one (JoinsSubscriberTx), so they are never called.
var errNoJoin = errors.New("mysqlinbox: the inbox cannot claim in a subscriber's transaction on MySQL")

func (*mysqlDialect) Name() string { return "MySQL" }

// The dialect's concerns are all the dialect itself.
func (m *mysqlDialect) Claims() dialect.Claims           { return m }
func (m *mysqlDialect) Leases() dialect.Leases           { return m }
func (m *mysqlDialect) Locks() dialect.Locks             { return m }
func (m *mysqlDialect) Maintenance() dialect.Maintenance { return m }
func (m *mysqlDialect) Schema() dialect.Schema           { return m }

// Speaks is MySQL, which MariaDB speaks too (dialect.Speaker).
func (*mysqlDialect) Speaks() driver.Server { return driver.MySQL }

// JoinsSubscriberTx is false. On PostgreSQL a claim made in a subscriber's transaction is guarded by a deferred
// constraint trigger that fails a commit made before the handler finished; MySQL has no deferred constraints, so
// nothing could stop such a commit from keeping a half-run handler's writes as applied.
func (*mysqlDialect) JoinsSubscriberTx() bool { return false }

// EndsTx (dialect.TxEnder): InnoDB rolls a transaction back whole on a deadlock (1213), and on a lock-wait timeout
// (1205) only when the server was started with innodb_rollback_on_timeout; otherwise a timeout undoes its statement
// alone, and a handler may go on, or try the statement again, in the same transaction.
func (*mysqlDialect) EndsTx(ctx context.Context, q driver.Executor) (func(error) bool, error) {
	var onTimeout bool
	if err := q.QueryRow(ctx, "SELECT @@innodb_rollback_on_timeout").Scan(&onTimeout); err != nil {
		return nil, fmt.Errorf("read innodb_rollback_on_timeout: %w", err)
	}
	return func(err error) bool {
		n := errNumber(err)
		return n == erLockDeadlock || n == erLockWaitTimeout && onTimeout
	}, nil
}

// MySQL's error numbers the inbox branches on.
const (
	erDupEntry           = 1062
	erNoSuchTable        = 1146
	erLockWaitTimeout    = 1205
	erLockDeadlock       = 1213
	erUnknownStmtHandler = 1243
	erTruncatedWrongVal  = 1292
	erTruncatedWrongStr  = 1366
	erDataTooLong        = 1406
	erNetPacketTooLarge  = 1153
	erTooBigForPacket    = 1301
	erWarnDataOutOfRange = 1264
	erCheckConstraint    = 3819 // MySQL
	erConstraintFailed   = 4025 // MariaDB
	erRecordChanged      = 1020 // MariaDB's snapshot isolation under REPEATABLE READ (innodb_snapshot_isolation)
)

func errNumber(err error) uint16 {
	var e *mysql.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}

func (*mysqlDialect) Classify(err error) dialect.ErrorKind {
	if errors.Is(err, mysql.ErrPktTooLarge) {
		return dialect.ValueRefused
	}
	switch errNumber(err) {
	case erNoSuchTable:
		return dialect.NoTable
	case erTruncatedWrongVal, erTruncatedWrongStr, erDataTooLong:
		return dialect.IDRefused
	case erNetPacketTooLarge, erTooBigForPacket, erWarnDataOutOfRange, erCheckConstraint, erConstraintFailed:
		return dialect.ValueRefused
	case erLockDeadlock, erLockWaitTimeout:
		return dialect.LockConflict
	case erRecordChanged:
		return dialect.SerializationFailure
	case erUnknownStmtHandler:
		return dialect.StatementMissing
	}
	return dialect.Other
}

// ConsumerID is 0 for every consumer: MySQL's rows carry the consumer's name.
func (*mysqlDialect) ConsumerID(context.Context, driver.Pool, string, string) (int, error) {
	return 0, nil
}

func (m *mysqlDialect) Claim(ctx context.Context, tx driver.Executor, p dialect.ClaimParams) (bool, error) {
	_, err := tx.Exec(ctx, m.sql(p.Table).claim, binArg(p.Consumer), binArg(p.ID), p.State)
	if errNumber(err) == erDupEntry {
		return false, nil
	}
	return err == nil, err
}

func (m *mysqlDialect) ReadRow(ctx context.Context, q driver.Executor, p dialect.RowParams) (state string, produced []byte, err error) {
	err = q.QueryRow(ctx, m.sql(p.Table).readRow, binArg(p.Consumer), binArg(p.ID)).Scan(&state, &produced)
	return state, produced, err
}

// ReadRows is ReadRow for many IDs in one statement (queries.readOne gives its shape): a batch whose
// claim found rows there already reads them all in one round trip, so that its copies of applied messages end
// with it instead of each in a transaction of its own.
func (m *mysqlDialect) ReadRows(ctx context.Context, q driver.Executor, p dialect.RowsParams) (map[string]dialect.StoredRow, error) {
	rows, err := q.Query(ctx, m.sql(p.Table).readRows(len(p.IDs)), paired(p.Consumer, p.IDs)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[string]dialect.StoredRow, len(p.IDs))
	for rows.Next() {
		var id []byte
		var row dialect.StoredRow
		if err := rows.Scan(&id, &row.State, &row.Produced); err != nil {
			return nil, err
		}
		found[string(id)] = row
	}
	return found, rows.Err()
}

func (m *mysqlDialect) SaveProduced(ctx context.Context, tx driver.Executor, p dialect.ProducedParams) error {
	_, err := tx.Exec(ctx, m.sql(p.Table).saveProduced, binArg(p.Consumer), binArg(p.ID), binArg(p.Produced))
	return err
}

func (*mysqlDialect) Finish(context.Context, driver.Executor, dialect.ProducedParams) (bool, error) {
	return false, errNoJoin
}

// Savepoint serves batch mode, whose messages each run in a savepoint of the batch's transaction; InnoDB keeps
// savepoints as PostgreSQL does. (The joined subscriber transaction, the other user, is refused at construction.)
func (*mysqlDialect) Savepoint(ctx context.Context, tx driver.Executor, step dialect.SavepointStep) error {
	query := "SAVEPOINT watermill_inbox_claim"
	switch step {
	case dialect.RollbackSavepoint:
		query = "ROLLBACK TO SAVEPOINT watermill_inbox_claim"
	case dialect.ReleaseSavepoint:
		query = "RELEASE SAVEPOINT watermill_inbox_claim"
	}
	_, err := tx.Exec(ctx, query)
	return err
}

// ClaimBatch claims the IDs, sorted, in two statements (queries.existingOne and claimMany give their shapes):
// a read of the rows that are there, then one INSERT of the rest. MySQL has no RETURNING to tell which rows of a
// multi-row INSERT IGNORE were new, and IGNORE would also store an ID too long for its column cut short. An ID
// whose copy commits, or begins, between the two makes the INSERT fail whole (InnoDB undoes just the failed
// statement); the IDs then go one statement each, as a claim of one ID always does.
func (m *mysqlDialect) ClaimBatch(ctx context.Context, tx driver.Executor, p dialect.ClaimBatchParams) ([]string, error) {
	q := m.sql(p.Table)
	if len(p.IDs) == 1 {
		return m.claimEach(ctx, tx, p)
	}
	there, err := m.existing(ctx, tx, q, p.Consumer, p.IDs)
	if err != nil {
		return nil, err
	}
	fresh := make([]string, 0, len(p.IDs)-len(there))
	args := make([]any, 0, 3*cap(fresh))
	for _, id := range p.IDs {
		if !there[id] {
			fresh = append(fresh, id)
			args = append(args, binArg(p.Consumer), binArg(id), p.State)
		}
	}
	if len(fresh) == 0 {
		return fresh, nil
	}
	_, err = tx.Exec(ctx, q.claimRows(len(fresh)), args...)
	if errNumber(err) == erDupEntry {
		p.IDs = fresh
		return m.claimEach(ctx, tx, p)
	}
	if err != nil {
		return nil, err
	}
	return fresh, nil
}

// existing returns which of ids have a committed row of consumer.
func (m *mysqlDialect) existing(ctx context.Context, tx driver.Executor, q *queries, consumer string, ids []string) (map[string]bool, error) {
	rows, err := tx.Query(ctx, q.existing(len(ids)), paired(consumer, ids)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	there := map[string]bool{}
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		there[string(id)] = true
	}
	return there, rows.Err()
}

// claimEach claims the IDs one statement each, in their order. A duplicate key fails only its own statement in
// InnoDB, not the transaction.
func (m *mysqlDialect) claimEach(ctx context.Context, tx driver.Executor, p dialect.ClaimBatchParams) ([]string, error) {
	claimed := make([]string, 0, len(p.IDs))
	for _, id := range p.IDs {
		ok, err := m.Claim(ctx, tx, dialect.ClaimParams{Table: p.Table, Consumer: p.Consumer, ID: id, State: p.State})
		if err != nil {
			return nil, err
		}
		if ok {
			claimed = append(claimed, id)
		}
	}
	return claimed, nil
}

func (m *mysqlDialect) Unclaim(ctx context.Context, tx driver.Executor, p dialect.RowParams) error {
	_, err := tx.Exec(ctx, m.sql(p.Table).forgetRow, binArg(p.Consumer), binArg(p.ID))
	return err
}

func (m *mysqlDialect) TakeOver(ctx context.Context, tx driver.Executor, p dialect.ClaimParams) (bool, error) {
	n, err := tx.Exec(ctx, m.sql(p.Table).takeOver, p.State, binArg(p.Consumer), binArg(p.ID))
	return n == 1, err
}

// ClaimLease reads the row under its exclusive lock and decides; a missing row is inserted, and an insert that
// lost a race with another first claim reads the row again (a second time is enough: the row then exists, and a
// locking read waits for its writer).
func (m *mysqlDialect) ClaimLease(ctx context.Context, tx driver.Executor, p dialect.LeaseClaimParams) (dialect.LeaseClaim, error) {
	q := m.sql(p.Table)
	lease := p.Lease.Microseconds()
	consumer, id := binArg(p.Consumer), binArg(p.ID)
	for try := 0; ; try++ {
		var c dialect.LeaseClaim
		var expired bool
		var remainingMS int64
		err := tx.QueryRow(ctx, q.leaseRead, consumer, id).Scan(&c.State, &c.Attempt, &c.LastError, &expired, &remainingMS, &c.Produced)
		if errors.Is(err, driver.ErrNoRows) {
			_, err = tx.Exec(ctx, q.leaseInsert, consumer, id, p.Token, lease)
			if errNumber(err) == erDupEntry && try == 0 {
				continue
			}
			if err != nil {
				return dialect.LeaseClaim{}, err
			}
			return dialect.LeaseClaim{Claimed: true, Attempt: 1}, nil
		}
		if err != nil {
			return dialect.LeaseClaim{}, err
		}
		free := c.State == "released" || (c.State == "processing" && expired)
		if !free {
			c.Remaining = time.Duration(remainingMS) * time.Millisecond
			return c, nil
		}
		if _, err := tx.Exec(ctx, q.leaseTake, p.Token, lease, consumer, id); err != nil {
			return dialect.LeaseClaim{}, err
		}
		out := dialect.LeaseClaim{Claimed: true, Attempt: c.Attempt + 1, LastError: c.LastError, Takeover: c.State == "processing"}
		if out.Takeover {
			out.LastError = fmt.Sprintf("lease of attempt %d expired", c.Attempt)
		}
		return out, nil
	}
}

func (m *mysqlDialect) ExtendLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	q := m.sql(p.Table)
	ms, _ := p.Arg.(int64)
	consumer, id := binArg(p.Consumer), binArg(p.ID)
	n, err := tx.Exec(ctx, q.leaseExtend, ms*1000, consumer, id, p.Token)
	if err != nil || n == 1 {
		return n == 1, err
	}
	return exists(tx.QueryRow(ctx, q.leaseHeld, consumer, id, p.Token))
}

func (m *mysqlDialect) ReleaseLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	n, err := tx.Exec(ctx, m.sql(p.Table).leaseRelease, binArg(p.Arg), binArg(p.Consumer), binArg(p.ID), p.Token)
	return n == 1, err
}

func (m *mysqlDialect) CompleteLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	q := m.sql(p.Table)
	consumer, id := binArg(p.Consumer), binArg(p.ID)
	n, err := tx.Exec(ctx, q.leaseComplete, consumer, id, p.Token)
	if err != nil || n != 1 {
		return false, err
	}
	if raw, _ := p.Arg.([]byte); raw != nil {
		if _, err := tx.Exec(ctx, q.saveProduced, consumer, id, binArg(raw)); err != nil {
			return false, err
		}
	}
	return true, nil
}

func (m *mysqlDialect) FailLease(ctx context.Context, tx driver.Executor, p dialect.LeaseWriteParams) (bool, error) {
	n, err := tx.Exec(ctx, m.sql(p.Table).leaseFail, binArg(p.Arg), binArg(p.Consumer), binArg(p.ID), p.Token)
	return n == 1, err
}

// The locks' names and holders are the inbox's own ASCII (a fixed name, a UUID), which every character set a session
// may switch to spells alike; they go as plain parameters.
func (m *mysqlDialect) TakeLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) (taken bool, cutoff time.Time, err error) {
	q := m.sql(p.Table)
	if _, err := tx.Exec(ctx, q.lockTake, p.Name, p.Holder, p.Hold.Microseconds()); err != nil {
		return false, time.Time{}, err
	}
	var at utcTime
	err = tx.QueryRow(ctx, q.lockHolder, p.Holder, p.Back.Microseconds(), p.Name).Scan(&taken, &at)
	return taken, at.Time, err
}

func (m *mysqlDialect) ExtendLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) (bool, error) {
	q := m.sql(p.Table)
	n, err := tx.Exec(ctx, q.lockExtend, p.Hold.Microseconds(), p.Name, p.Holder)
	if err != nil || n == 1 {
		return n == 1, err
	}
	return exists(tx.QueryRow(ctx, q.lockHeld, p.Name, p.Holder))
}

func (m *mysqlDialect) ReleaseLock(ctx context.Context, tx driver.Executor, p dialect.LockParams) error {
	_, err := tx.Exec(ctx, m.sql(p.Table).lockRelease, p.Name, p.Holder)
	return err
}

func (m *mysqlDialect) Consumers(ctx context.Context, tx driver.Executor, table string) ([]string, error) {
	var out []string
	err := dialect.ScanRows(ctx, tx, m.sql(table).consumers, nil, func(r driver.Rows) error {
		var c string
		err := r.Scan(&c)
		out = append(out, c)
		return err
	})
	return out, err
}

func (m *mysqlDialect) CleanupBatch(ctx context.Context, tx driver.Executor, p dialect.CleanupBatchParams) (dialect.CleanupBatch, error) {
	q := m.sql(p.Table)
	b := dialect.CleanupBatch{Next: p.From}
	var last utcTime
	consumer := binArg(p.Consumer)
	if err := tx.QueryRow(ctx, q.batchPick, consumer, utcArg(p.From), utcArg(p.Cutoff), p.Limit).Scan(&b.Picked, &last); err != nil {
		return b, err
	}
	if b.Picked == 0 {
		return b, nil
	}
	b.Next = last.Time
	n, err := tx.Exec(ctx, q.batchDelete, consumer, utcArg(p.From), utcArg(last.Time), utcArg(p.Cutoff), p.Limit)
	b.Deleted = n
	return b, err
}

func (m *mysqlDialect) CountAbandoned(ctx context.Context, tx driver.Executor, table string, cutoff time.Time) (n int64, err error) {
	err = tx.QueryRow(ctx, m.sql(table).abandoned, utcArg(cutoff)).Scan(&n)
	return n, err
}

func (m *mysqlDialect) Remembers(ctx context.Context, tx driver.Executor, table string) ([]dialect.Memory, error) {
	return scanMemories(ctx, tx, m.sql(table).memory)
}

func (m *mysqlDialect) Stats(ctx context.Context, tx driver.Executor, table string) (st dialect.Stats, err error) {
	q := m.sql(table)
	var now utcTime
	err = tx.QueryRow(ctx, q.statsSizes, table).Scan(&now, &st.Exists, &st.TableBytes, &st.IndexBytes, &st.TotalBytes)
	st.Now = now.Time
	if err != nil || !st.Exists {
		return st, err
	}
	st.Consumers, err = scanConsumerStats(ctx, tx, q.statsRows)
	return st, err
}

func (m *mysqlDialect) Forget(ctx context.Context, tx driver.Executor, p dialect.ForgetParams) (dialect.Forgotten, error) {
	q := m.sql(p.Table)
	var f dialect.Forgotten
	var live bool
	var remainingMS int64
	var processedAt utcTime
	consumer, id := binArg(p.Consumer), binArg(p.ID)
	err := tx.QueryRow(ctx, q.forgetRead, consumer, id).
		Scan(&f.State, &processedAt, &f.Attempts, &f.LastError, &f.HadProduced, &live, &remainingMS)
	f.ProcessedAt = processedAt.Time
	switch {
	case errors.Is(err, driver.ErrNoRows):
		return dialect.Forgotten{}, nil
	case err != nil:
		return dialect.Forgotten{}, err
	case live && !p.Force:
		return dialect.Forgotten{Held: true, Remaining: time.Duration(remainingMS) * time.Millisecond}, nil
	}
	if _, err := tx.Exec(ctx, q.forgetRow, consumer, id); err != nil {
		return dialect.Forgotten{}, err
	}
	f.Deleted = true
	return f, nil
}

// exists scans a row that is there when a condition holds.
func exists(row driver.Row) (bool, error) {
	var one int
	return dialect.Found(row, &one)
}

// lockName is Migrate's named lock for table: at most 64 characters, as MySQL requires, whatever the table's name.
func lockName(table string) string {
	h := fnv.New64a()
	h.Write([]byte(table))
	return fmt.Sprintf("watermill-inbox:migrate:%016x", h.Sum64())
}

// binArg is a value of a message, an option or an error (a string, or []byte) as a {bin} or {text} parameter of
// the queries: base64, whose ASCII every character set a session may switch to carries unchanged. Over the binary
// protocol go-sql-driver sends strings and []byte alike as strings, which the server reads in the session's
// character_set_client and converts to its character_set_connection when the two differ: a session switched by
// SET character_set_client = sjis (a handler's, or a pool hook's) would store an event ID, and match it, as other
// bytes than sent. nil stays NULL.
func binArg(v any) any {
	switch v := v.(type) {
	case string:
		return base64.StdEncoding.EncodeToString([]byte(v))
	case []byte:
		if v == nil {
			return nil
		}
		return base64.StdEncoding.EncodeToString(v)
	case nil:
		return nil
	}
	panic(fmt.Sprintf("mysqlinbox: a %T is not a value the inbox stores as bytes", v))
}

// paired is consumer and each of ids in turn: the arguments of a statement with a lookup per ID.
func paired(consumer string, ids []string) []any {
	args := make([]any, 0, 2*len(ids))
	for _, id := range ids {
		args = append(args, binArg(consumer), binArg(id))
	}
	return args
}
