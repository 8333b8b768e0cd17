package mysqlinbox

import (
	"context"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

var _ dialect.Fingerprinter = (*mysqlDialect)(nil)

func (m *mysqlDialect) AddFingerprint(ctx context.Context, tx driver.Executor, table string) error {
	present, _, err := m.FingerprintColumn(ctx, tx, table)
	if err != nil || present {
		return err
	}
	_, err = tx.Exec(ctx, m.sql(table).fingerprintAdd)
	return err
}

func (m *mysqlDialect) FingerprintColumn(ctx context.Context, q driver.Executor, table string) (bool, string, error) {
	return dialect.CheckColumnType(q.QueryRow(ctx, m.sql(table).fingerprintColumn, table), table, "fingerprint", "binary(8)")
}

func (m *mysqlDialect) SaveFingerprint(ctx context.Context, tx driver.Executor, p dialect.FingerprintParams) error {
	_, err := tx.Exec(ctx, m.sql(p.Table).fingerprintSave, binArg(p.Fingerprint), binArg(p.Consumer), binArg(p.ID))
	return err
}

func (m *mysqlDialect) ReadFingerprint(ctx context.Context, q driver.Executor, p dialect.RowParams) ([]byte, error) {
	var f []byte
	err := q.QueryRow(ctx, m.sql(p.Table).fingerprintRead, binArg(p.Consumer), binArg(p.ID)).Scan(&f)
	return f, err
}
