package postgres

import (
	"context"
	"encoding/hex"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// The fingerprint of a message (inbox.WithFingerprint), in a column that only the tables of inboxes that use it have.
const (
	// bytea: eight bytes and a one-byte length, with no alignment to pad for. Adding a nullable column without a
	// default changes only the catalog: no row is rewritten, and the table's lock lasts for that change. It is the
	// ninth column, so new rows that hold a NULL need a second byte of null bitmap, which pushes their header from
	// 24 to 32 bytes: the cost docs/storage.md measures, paid only by the tables of inboxes that use fingerprints.
	// On a partitioned inbox table the column reaches every partition.
	addFingerprintSQL = `ALTER TABLE {table} ADD COLUMN IF NOT EXISTS fingerprint bytea`

	// The column's type, or no row when the table has no such column.
	fingerprintColumnSQL = `SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
		WHERE a.attrelid = to_regclass($1) AND a.attname = 'fingerprint' AND a.attnum > 0 AND NOT a.attisdropped`

	// Runs right after a claim that inserted the row, in its transaction, which checked the consumer's id: the
	// row is the transaction's own and locked by it, so the update waits for nobody. A separate statement keeps
	// the claims of inboxes without fingerprints, and their tables, as they are. The fingerprint travels as hex
	// text, which every driver sends alike and the literal arguments can spell.
	saveFingerprintSQL = `UPDATE {table} SET fingerprint = decode($3, 'hex') WHERE message_id = $2 AND consumer_id = $1`

	// Runs only on a copy of a message applied before, after the read of its row (producedSQL), in the same
	// transaction, or in a short one of its own when the copy has none.
	readFingerprintSQL = `SELECT fingerprint FROM {table} WHERE message_id = $2 AND consumer_id = $1`
)

func (pg *postgres) AddFingerprint(ctx context.Context, tx driver.Executor, table string) error {
	_, err := tx.Exec(ctx, pg.sql(addFingerprintSQL, table))
	return err
}

func (pg *postgres) FingerprintColumn(ctx context.Context, q driver.Executor, table string) (bool, string, error) {
	return dialect.CheckColumnType(q.QueryRow(ctx, fingerprintColumnSQL, quoteIdent(table)), table, "fingerprint", "bytea")
}

func (pg *postgres) SaveFingerprint(ctx context.Context, tx driver.Executor, p dialect.FingerprintParams) error {
	_, err := tx.Exec(ctx, pg.sql(saveFingerprintSQL, p.Table), p.ConsumerID, p.ID, hex.EncodeToString(p.Fingerprint))
	return err
}

func (pg *postgres) ReadFingerprint(ctx context.Context, q driver.Executor, p dialect.RowParams) ([]byte, error) {
	var f []byte
	err := q.QueryRow(ctx, pg.sql(readFingerprintSQL, p.Table), p.ConsumerID, p.ID).Scan(&f)
	return f, err
}

var _ dialect.Fingerprinter = (*postgres)(nil)
