package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/dialect/postgres"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Database is the database an inbox keeps its tables in, reached through a driver adapter, and the one way to run
// the inbox's maintenance calls: Migrate, Migrations, Cleanup, NewCleaner, ReadStats, Forget and Remembers. Get it
// with OnSQL for PostgreSQL over database/sql, pgxinbox.Database for pgx v5, mysqlinbox.Database for MySQL and
// MariaDB, or On and OnDialect for an adapter of your own; each call then reads the same:
//
//	err := inbox.OnSQL(db).Migrate(ctx, inbox.WithTable("billing_inbox"))
//
// Its New builds an Inbox as the package-level New does.
type Database struct {
	dialect dialect.Dialect
	schema  dialect.Schema // the dialect's, asked for once by OnDialect
	pool    driver.Pool
	joiners []driver.Joiner
	// ender, shared, native and caps are what the dialect and the pool can do beyond their interfaces, found once
	// by OnDialect: ender tells the errors that end a transaction under a statement (nil: none do), shared begins
	// transactions that give each handler a view of its own (nil: the pool's are plain), native names the type of
	// the transactions the pool's handlers get (nil: it cannot tell), and caps is what the pool's transactions can
	// do beyond driver.Tx (driver.TxCapser; View only for a SharedPool, whose BeginShared begins those that have
	// views).
	ender  dialect.TxEnder
	shared driver.SharedPool
	native driver.NativeTyper
	caps   driver.TxCaps
	// serverOK is set once the server is known to be one the dialect speaks, or cannot be told (checkServer).
	serverOK atomic.Bool
	// home is where the pool reaches, as the dialect's Locator describes it, once asked (location).
	home atomic.Pointer[string]
	// ends is the dialect's test of the errors that end a transaction under a statement, once asked (endsTx).
	ends atomic.Pointer[func(error) bool]
}

// On returns the PostgreSQL Database that pool reaches. joiners find, in a message's context, a subscriber's
// transaction that the inbox joins instead of beginning its own (see WithSubscriberTx): SQLv3Joiner for
// watermill-sql v3's, pgxinbox.SQLv4Joiner for v4's. On joins only those it is given; OnSQL, New and Middleware
// join v3's.
func On(pool driver.Pool, joiners ...driver.Joiner) *Database {
	return OnDialect(postgres.Dialect(), pool, joiners...)
}

// OnDialect returns the Database that pool reaches, speaking d's SQL: postgres.Dialect(), or another database's dialect
// such as the mysqlinbox module's. A dialect that cannot join a subscriber's transaction refuses joiners: New
// then fails with ErrInvalidOption.
func OnDialect(d dialect.Dialect, pool driver.Pool, joiners ...driver.Joiner) *Database {
	ender, _ := d.(dialect.TxEnder)
	shared, _ := pool.(driver.SharedPool)
	native, _ := pool.(driver.NativeTyper)
	var caps driver.TxCaps
	if c, ok := pool.(driver.TxCapser); ok {
		caps = c.TxCaps()
	}
	if shared == nil {
		caps.View = nil
	}
	var schema dialect.Schema
	if d != nil {
		schema = d.Schema()
	}
	return &Database{dialect: d, schema: schema, pool: pool, joiners: joiners, ender: ender, shared: shared,
		native: native, caps: caps}
}

// OnSQL returns the PostgreSQL Database that db reaches through database/sql (lib/pq, or pgx's stdlib driver),
// joining watermill-sql v3's subscriber transaction as New and Middleware do. v4's is joined only through
// pgxinbox.SQLv4Joiner: its package compiles pgx into every program that imports it.
func OnSQL(db *sql.DB) *Database { return On(driver.StdSQL(db), SQLv3Joiner()) }

// location returns where the pool reaches, as the dialect's Locator describes it: asked once, and again when
// fresh (a server that restarted describes itself anew).
func (d *Database) location(ctx context.Context, loc dialect.Locator, fresh bool) (string, error) {
	if home := d.home.Load(); home != nil && !fresh {
		return *home, nil
	}
	tx, err := d.pool.Begin(ctx, driver.TxOptions{ReadOnly: true})
	if err != nil {
		return "", fmt.Errorf("begin: %w", err)
	}
	home, err := loc.Locate(ctx, tx)
	_ = tx.Rollback(ctx) // it only read
	if err != nil {
		return "", err
	}
	d.home.Store(&home)
	return home, nil
}

// check refuses, without a round trip, a Database that cannot work: a nil one, a pool over a nil handle, or a pool
// that knows it reaches a server its dialect does not speak (driver.Identifier). Constructors call it, so that
// such a database fails there instead of in every message. op prefixes the message ("Migrate: ").
func (d *Database) check(op string) error {
	if d == nil || d.pool == nil || d.dialect == nil {
		return fmt.Errorf("%w: %sthe database is nil", ErrInvalidOption, op)
	}
	id, ok := d.pool.(driver.Identifier)
	if !ok {
		return nil
	}
	server, err := id.Identify()
	if err != nil {
		return fmt.Errorf("%w: %s%w", ErrInvalidOption, op, err)
	}
	if server == "" {
		return nil // checkServer asks the server
	}
	name := string(server)
	if server == driver.MySQL {
		name = "MySQL or MariaDB" // go-sql-driver/mysql reaches either
	}
	if err := d.wrongServer(op, server, name); err != nil {
		return err
	}
	d.serverOK.Store(true)
	return nil
}

// checkServer asks the server which kind it is when the pool could not tell (check), once per Database: before
// the first message, and in Migrate. A database that cannot be reached fails it, and the next call asks again.
func (d *Database) checkServer(ctx context.Context) error {
	if d.serverOK.Load() {
		return nil
	}
	if _, ok := d.dialect.(dialect.Speaker); !ok {
		d.serverOK.Store(true)
		return nil
	}
	tx, err := d.pool.Begin(ctx, driver.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("inbox: check which database this is: begin: %w", err)
	}
	server, name, err := dialect.AskServer(ctx, tx)
	_ = tx.Rollback(ctx) // it only read
	if err != nil {
		return fmt.Errorf("inbox: check which database this is: %w", err)
	}
	if server != "" {
		if err := d.wrongServer("", server, name); err != nil {
			return err
		}
	}
	d.serverOK.Store(true) // a server neither kind's version() describes is let be: its statements will tell
	return nil
}

// wrongServer returns the error for a server that the dialect does not speak, named name, and nil for one it does.
func (d *Database) wrongServer(op string, server driver.Server, name string) error {
	sp, ok := d.dialect.(dialect.Speaker)
	if !ok || sp.Speaks() == server {
		return nil
	}
	use := map[driver.Server]string{
		driver.PostgreSQL: "use inbox.New, inbox.On or the pgxinbox module",
		driver.MySQL:      "use the mysqlinbox module",
	}[server]
	if use == "" {
		use = "use the dialect of " + string(server)
	}
	return fmt.Errorf("%w: %sthis database is %s, not %s: %s", ErrInvalidOption, op, name, sp.Speaks(), use)
}
