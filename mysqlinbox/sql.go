package mysqlinbox

import (
	"strings"
	"sync"
)

// queries holds every statement the MySQL dialect runs on one inbox table, formatted once for its name. In the
// templates, {table}, {produced}, {locks} and {versions} stand for the inbox table and the tables named after it,
// each quoted as an identifier (quoteIdent). Every value goes as a bind parameter: {bin} is the placeholder of a
// value that must arrive as its exact bytes (an event ID, a consumer name, a fingerprint, produced messages), and
// {text} that of an error text for last_error; the dialect sends both as base64 (see binArg for why). A plain ?
// takes a number, or ASCII the inbox makes itself (a state, a lease token, a lock's name and holder).
//
// What differs from PostgreSQL, and shapes these statements: there is no ON CONFLICT ... RETURNING and no
// UPDATE ... RETURNING (MariaDB has INSERT and DELETE ... RETURNING, MySQL neither), no data-modifying CTE, and an
// UPDATE's affected-row count means "changed" or "matched" depending on the client's CLIENT_FOUND_ROWS flag. So a
// claim is a plain INSERT whose duplicate-key error means "there already", and every compare-and-set either changes
// a column on every match (the state, always), or reads the row back when it reports none.
type queries struct {
	claim        string
	readRow      string
	saveProduced string
	takeOver     string
	readOne      string // readRows' part for one ID, and its texts by count of IDs
	reads        sync.Map
	existingOne  string // existing's, the same way
	existings    sync.Map
	claimMany    string // claimRows', up to its rows, and each row
	claimRow     string
	claims       sync.Map

	fingerprintAdd    string
	fingerprintColumn string
	fingerprintSave   string
	fingerprintRead   string

	leaseRead     string
	leaseInsert   string
	leaseTake     string
	leaseExtend   string
	leaseHeld     string
	leaseRelease  string
	leaseComplete string
	leaseFail     string

	lockTake    string
	lockHolder  string
	lockExtend  string
	lockHeld    string
	lockRelease string
	consumers   string
	batchPick   string
	batchDelete string
	abandoned   string
	memory      string
	statsRows   string
	statsSizes  string
	forgetRead  string
	forgetRow   string

	versionsCreate  string
	versionsRead    string
	versionsRecord  string
	lockGet         string
	lockFree        string
	lockWaitNone    string // the session's DDL waits for no metadata lock (MySQL: a second)
	lockWaitDefault string
}

// readRows, existing and claimRows are their statements for n IDs, each text built once per count.
func (q *queries) readRows(n int) string {
	return forCount(&q.reads, n, func() string { return repeated(n, q.readOne, " UNION ALL ") })
}

func (q *queries) existing(n int) string {
	return forCount(&q.existings, n, func() string { return repeated(n, q.existingOne, " UNION ALL ") })
}

func (q *queries) claimRows(n int) string {
	return forCount(&q.claims, n, func() string { return q.claimMany + repeated(n, q.claimRow, ", ") })
}

func forCount(texts *sync.Map, n int, build func() string) string {
	if text, ok := texts.Load(n); ok {
		return text.(string)
	}
	text, _ := texts.LoadOrStore(n, build())
	return text.(string)
}

// repeated is n copies of part, separated by sep.
func repeated(n int, part, sep string) string {
	return strings.TrimSuffix(strings.Repeat(part+sep, n), sep)
}

// quoteIdent quotes name as one MySQL identifier, a backquote in it doubled. The inbox's options admit only
// lower-case letters, digits and underscores in a table name; the quoting keeps any other name one name too.
func quoteIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

func newQueries(table string) *queries {
	q := strings.NewReplacer(
		"{table}", quoteIdent(table),
		"{produced}", quoteIdent(table+"_produced"),
		"{locks}", quoteIdent(table+"_locks"),
		"{versions}", quoteIdent(table+"_migrations"),
		// The server turns the ASCII of base64 back into bytes only after it has read the parameter in whatever
		// character sets the session has (CONVERT first, for a connection character set such as ucs2 that is not
		// ASCII's): no session setting can change a byte of the value. A constant to the optimizer, so the
		// primary key's lookups stay lookups.
		"{bin}", "FROM_BASE64(CONVERT(? USING ascii))",
		// An error text is UTF-8 already (lease mode makes it so), so the bytes are relabelled, never converted.
		"{text}", "CONVERT(FROM_BASE64(CONVERT(? USING ascii)) USING utf8mb4)",
	).Replace
	return &queries{
		// The claim is the whole deduplication, as on PostgreSQL: the primary key makes a second INSERT of the same
		// (consumer, message_id) wait for the first transaction to end, then fail with a duplicate key (1062) if
		// it committed, which the dialect reads as "claimed before". InnoDB rolls back only the failed statement,
		// so the transaction goes on. Not INSERT IGNORE: it would also turn an ID too long for the column into a
		// warning and store it cut, claiming another ID.
		claim: q(`INSERT INTO {table} (consumer, message_id, state, processed_at) VALUES ({bin}, {bin}, ?, UTC_TIMESTAMP(6))`),

		// Runs only on a duplicate. A locking read reads the newest committed row whatever the isolation level:
		// under REPEATABLE READ, InnoDB's default and a handler's transaction's, a plain SELECT would read the
		// transaction's snapshot, which may predate the commit that made the claim fail. A shared lock is enough,
		// and the failed INSERT already holds one on the row.
		readRow: q(`SELECT i.state, p.produced FROM {table} i
			LEFT JOIN {produced} p ON p.consumer = i.consumer AND p.message_id = i.message_id
			WHERE i.consumer = {bin} AND i.message_id = {bin}
			LOCK IN SHARE MODE`),

		// readRows: readRow for many IDs, in a batch's transaction after its claims, a locking read for readRow's
		// reason: one lookup of the primary key per ID, joined by UNION ALL, each locking only its ID's row, which
		// its failed claim holds a shared lock on already. Not one IN list: for that InnoDB may scan the consumer's
		// rows instead (it did on a small table, even with FORCE INDEX (PRIMARY), reading by the key's first
		// column), locking each, and wait up to innodb_lock_wait_timeout for the uncommitted claim of a message in
		// flight beside the batch.
		readOne: q(`(SELECT i.message_id, i.state, p.produced FROM {table} i
			LEFT JOIN {produced} p ON p.consumer = i.consumer AND p.message_id = i.message_id
			WHERE i.consumer = {bin} AND i.message_id = {bin} LOCK IN SHARE MODE)`),

		// A batch's claim (ClaimBatch): existing reads which of its IDs have a committed row, claimMany inserts the
		// rest in one statement, in the IDs' sorted order, so that batches sharing IDs lock them in one order.
		// existing is a plain read and takes no lock: a locking read of an ID without a row would lock the gap
		// before it under REPEATABLE READ, and two batches that each read a gap the other then inserts into
		// deadlock. What it misses, an uncommitted claim of an ID or one that commits after it, the INSERT meets:
		// it waits for that claim, and fails with a duplicate key if it commits. It is one lookup per ID, as
		// readRows is, so that under SERIALIZABLE, where InnoDB makes it a locking read, it locks no other row of
		// the consumer. Under REPEATABLE READ it takes the transaction's snapshot, so the batch's handlers read the
		// database as of their claim.
		existingOne: q(`(SELECT message_id FROM {table} WHERE consumer = {bin} AND message_id = {bin})`),
		claimMany:   q(`INSERT INTO {table} (consumer, message_id, state, processed_at) VALUES `),
		claimRow:    q(`({bin}, {bin}, ?, UTC_TIMESTAMP(6))`),

		saveProduced: q(`INSERT INTO {produced} (consumer, message_id, produced) VALUES ({bin}, {bin}, {bin})`),

		// The fingerprint (inbox.WithFingerprint), in a column only the tables of inboxes that use it have. A
		// nullable column added last is an instant change on MariaDB 10.3+ and MySQL 8.0.29+: no row is rewritten.
		// MySQL has no ADD COLUMN IF NOT EXISTS, so the dialect reads the column first (fingerprintColumn) and
		// adds it only when it is missing, under Migrate's lock. A NULL costs InnoDB's compact row formats one bit
		// of the null bitmap, which has room for it, so the rows of inboxes without fingerprints never pay.
		fingerprintAdd: q(`ALTER TABLE {table} ADD COLUMN fingerprint BINARY(8) NULL`),
		fingerprintColumn: `SELECT COLUMN_TYPE FROM information_schema.COLUMNS
			WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'fingerprint'`,
		// Right after the claim that inserted the row, in its transaction: the row is its own and locked by it.
		fingerprintSave: q(`UPDATE {table} SET fingerprint = {bin} WHERE consumer = {bin} AND message_id = {bin}`),
		// Only on a copy of an applied message, locking as readRow does, for the same reason.
		fingerprintRead: q(`SELECT fingerprint FROM {table} WHERE consumer = {bin} AND message_id = {bin} LOCK IN SHARE MODE`),

		// Takes, for the transaction mode, a row lease mode left free. It always changes state, so the affected
		// count is 1 exactly when the conditions matched, with or without CLIENT_FOUND_ROWS.
		takeOver: q(`UPDATE {table} SET state = ?, locked_until = NULL, lease_token = NULL, processed_at = UTC_TIMESTAMP(6)
			WHERE consumer = {bin} AND message_id = {bin}
				AND (state = 'released' OR (state = 'processing' AND locked_until <= UTC_TIMESTAMP(6)))`),

		// Lease mode's claim is read, decide, write under the row's exclusive lock, in the inbox's short READ
		// COMMITTED transaction: the locking read waits for any other taker and then sees its commit, so two
		// takers are serialized. The remaining lease is computed by the database, whose clock it is on. last_error
		// is read as bytes, which no session's character_set_results converts.
		leaseRead: q(`SELECT i.state, COALESCE(i.attempts, 0), COALESCE(CONVERT(i.last_error USING binary), X''),
				COALESCE(i.locked_until <= UTC_TIMESTAMP(6), TRUE),
				GREATEST(0, COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), i.locked_until), 0)) DIV 1000,
				p.produced
			FROM {table} i
			LEFT JOIN {produced} p ON p.consumer = i.consumer AND p.message_id = i.message_id
			WHERE i.consumer = {bin} AND i.message_id = {bin}
			FOR UPDATE`),
		// A new ID. Racing with another first claim, it waits, and fails with a duplicate key when that commits;
		// the dialect then reads the row again.
		leaseInsert: q(`INSERT INTO {table} (consumer, message_id, state, attempts, lease_token, locked_until, processed_at)
			VALUES ({bin}, {bin}, 'processing', 1, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6))`),
		// A free row, locked by leaseRead. last_error names an expired lease when the row was still 'processing'.
		leaseTake: q(`UPDATE {table} SET
				last_error   = CASE WHEN state = 'processing'
					THEN CONCAT('lease of attempt ', COALESCE(attempts, 0), ' expired') ELSE last_error END,
				state        = 'processing',
				attempts     = COALESCE(attempts, 0) + 1,
				lease_token  = ?,
				locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
				processed_at = UTC_TIMESTAMP(6)
			WHERE consumer = {bin} AND message_id = {bin}`),

		// The holder's writes: each a compare-and-set on its token and the 'processing' state. Release, complete
		// and fail change the state, so their affected count is 1 exactly when they matched. An extension may
		// change nothing (the same microsecond), so when it reports none, leaseHeld reads whether it matched.
		leaseExtend: q(`UPDATE {table} SET locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
			WHERE consumer = {bin} AND message_id = {bin} AND lease_token = ? AND state = 'processing'`),
		leaseHeld: q(`SELECT 1 FROM {table}
			WHERE consumer = {bin} AND message_id = {bin} AND lease_token = ? AND state = 'processing'`),
		leaseRelease: q(`UPDATE {table} SET state = 'released', locked_until = NULL, last_error = {text}, processed_at = UTC_TIMESTAMP(6)
			WHERE consumer = {bin} AND message_id = {bin} AND lease_token = ? AND state = 'processing'`),
		// Followed, in the same short transaction, by saveProduced when there are produced messages: the two
		// commit together or not at all.
		leaseComplete: q(`UPDATE {table} SET state = 'done', locked_until = NULL, processed_at = UTC_TIMESTAMP(6)
			WHERE consumer = {bin} AND message_id = {bin} AND lease_token = ? AND state = 'processing'`),
		leaseFail: q(`UPDATE {table} SET state = 'failed', locked_until = NULL, last_error = {text}, processed_at = UTC_TIMESTAMP(6)
			WHERE consumer = {bin} AND message_id = {bin} AND lease_token = ? AND state = 'processing'`),

		// The cleanup's lock, a row held for a time by the database clock, as on PostgreSQL and for the same
		// reasons. The upsert takes the row when it is missing or its time ran out, and leaves a live holder's
		// alone; the assignments read the row's old values (held_until is assigned last, after holder has read
		// it). lockHolder then tells, from the row this transaction locked, who holds it, with the cutoff.
		lockTake: q(`INSERT INTO {locks} (name, holder, held_until) VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
			ON DUPLICATE KEY UPDATE
				holder     = IF(held_until <= UTC_TIMESTAMP(6), VALUES(holder), holder),
				held_until = IF(holder = VALUES(holder), VALUES(held_until), held_until)`),
		lockHolder:  q(`SELECT holder = ?, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND FROM {locks} WHERE name = ?`),
		lockExtend:  q(`UPDATE {locks} SET held_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND WHERE name = ? AND holder = ?`),
		lockHeld:    q(`SELECT 1 FROM {locks} WHERE name = ? AND holder = ?`),
		lockRelease: q(`DELETE FROM {locks} WHERE name = ? AND holder = ?`),

		// DISTINCT on the primary key's first column: InnoDB reads it with a loose index scan, one probe per
		// consumer.
		consumers: q(`SELECT DISTINCT consumer FROM {table} ORDER BY consumer`),

		// One bounded batch of one consumer's expired rows, oldest first along "{table}_processed_at", from where
		// the previous batch ended (inclusive: rows of one transaction share a processed_at). MySQL has no row
		// address to delete by, so the batch is two statements: batchPick counts the rows and finds the last
		// one's processed_at, and batchDelete deletes the same rows by their conditions, bounded by both.
		// 'processing' rows are never deleted.
		batchPick: q(`SELECT COUNT(*), MAX(processed_at) FROM (
				SELECT processed_at FROM {table}
				WHERE consumer = {bin} AND state <> 'processing' AND processed_at >= ? AND processed_at < ?
				ORDER BY processed_at LIMIT ?
			) picked`),
		batchDelete: q(`DELETE FROM {table}
			WHERE consumer = {bin} AND state <> 'processing' AND processed_at >= ? AND processed_at <= ? AND processed_at < ?
			ORDER BY processed_at LIMIT ?`),

		abandoned: q(`SELECT COUNT(*) FROM {table} WHERE state = 'processing' AND locked_until < ?`),

		// Each consumer's oldest row that is not 'processing': one probe of "{table}_processed_at" per consumer,
		// stepping over its few 'processing' rows.
		memory: q(`SELECT c.consumer, (
				SELECT i.processed_at FROM {table} i
				WHERE i.consumer = c.consumer AND i.state <> 'processing'
				ORDER BY i.processed_at LIMIT 1
			) AS oldest, UTC_TIMESTAMP(6)
			FROM (SELECT DISTINCT consumer FROM {table}) c
			HAVING oldest IS NOT NULL
			ORDER BY c.consumer`),

		// Exact counts for an operator: reads the whole table.
		statsRows: q(`SELECT consumer, COUNT(*),
				COALESCE(SUM(state = 'done'), 0),
				COALESCE(SUM(state = 'failed'), 0),
				COALESCE(SUM(state = 'released'), 0),
				COALESCE(SUM(state = 'processing' AND locked_until > UTC_TIMESTAMP(6)), 0),
				COALESCE(SUM(state = 'processing' AND (locked_until IS NULL OR locked_until <= UTC_TIMESTAMP(6))), 0),
				MIN(CASE WHEN state <> 'processing' THEN processed_at END)
			FROM {table} GROUP BY consumer ORDER BY consumer`),
		// Sizes from information_schema, which InnoDB estimates: data_length is the clustered index, the rows.
		statsSizes: `SELECT UTC_TIMESTAMP(6), COUNT(*) > 0, COALESCE(SUM(data_length), 0), COALESCE(SUM(index_length), 0),
				COALESCE(SUM(data_length + index_length), 0)
			FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,

		// Forget reads the row under its lock, then deletes it unless a live lease keeps it; the cascade removes
		// its produced messages. last_error is read as bytes, as leaseRead reads it.
		forgetRead: q(`SELECT state, processed_at, COALESCE(attempts, 0), COALESCE(CONVERT(last_error USING binary), X''),
				EXISTS (SELECT 1 FROM {produced} p WHERE p.consumer = i.consumer AND p.message_id = i.message_id),
				state = 'processing' AND locked_until > UTC_TIMESTAMP(6),
				GREATEST(0, COALESCE(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), locked_until), 0)) DIV 1000
			FROM {table} i WHERE consumer = {bin} AND message_id = {bin}
			FOR UPDATE`),
		forgetRow: q(`DELETE FROM {table} WHERE consumer = {bin} AND message_id = {bin}`),

		// Migrate's versions table, and its lock (Migrate says why a named lock).
		versionsCreate: q(`CREATE TABLE IF NOT EXISTS {versions} (
				version    INT          NOT NULL PRIMARY KEY,
				name       VARCHAR(255) NOT NULL,
				applied_at DATETIME(6)  NOT NULL
			) ENGINE = InnoDB`),
		versionsRead:    q(`SELECT COALESCE(MAX(version), 0) FROM {versions}`),
		versionsRecord:  q(`INSERT INTO {versions} (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`),
		lockGet:         `SELECT GET_LOCK(?, ?)`,
		lockWaitNone:    `SET SESSION lock_wait_timeout = 0`,
		lockWaitDefault: `SET SESSION lock_wait_timeout = DEFAULT`,
		lockFree:        `SELECT RELEASE_LOCK(?)`,
	}
}
