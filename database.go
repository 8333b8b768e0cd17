package inbox

import (
	"context"
	"database/sql"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Database is the database an inbox keeps its tables in, reached through a driver adapter. The package-level
// functions that take a *sql.DB (New, Middleware, Migrate, Cleanup, NewCleaner, ReadStats, Forget, Remembers) are
// its methods over database/sql; other client libraries reach the same methods through their adapter, such as the
// pgxinbox module's for pgx v5:
//
//	ib, err := inbox.On(driver.StdSQL(db)).New(opts...) // the same as inbox.New(db, opts...)
type Database struct {
	dialect dialect.Dialect
	pool    driver.Pool
	joiners []driver.Joiner
}

// On returns the PostgreSQL Database that pool reaches. joiners find, in a message's context, a subscriber's
// transaction that the inbox joins instead of beginning its own (see WithSubscriberTx): SQLv3Joiner for
// watermill-sql v3's, pgxinbox.SQLv4Joiner for v4's. On joins only those it is given; the package-level functions
// join v3's.
func On(pool driver.Pool, joiners ...driver.Joiner) *Database {
	return OnDialect(Postgres, pool, joiners...)
}

// OnDialect returns the Database that pool reaches, speaking d's SQL: Postgres, or another database's dialect
// such as the mysqlinbox module's. A dialect that cannot join a subscriber's transaction refuses joiners: New
// then fails with ErrInvalidOption.
func OnDialect(d dialect.Dialect, pool driver.Pool, joiners ...driver.Joiner) *Database {
	return &Database{dialect: d, pool: pool, joiners: joiners}
}

// stdDatabase is the Database of the package-level functions: PostgreSQL over database/sql, joining watermill-sql
// v3's subscriber transaction. v4's is joined only through pgxinbox.SQLv4Joiner: its package compiles pgx into
// every program that imports it.
func stdDatabase(db *sql.DB) *Database { return On(driver.StdSQL(db), SQLv3Joiner()) }

// joined returns the subscriber transaction in ctx that the inbox should join, if any.
func (d *Database) joined(ctx context.Context) (driver.Tx, bool) {
	for _, j := range d.joiners {
		if tx, ok := j.Joined(ctx); ok {
			return tx, true
		}
	}
	return nil, false
}
