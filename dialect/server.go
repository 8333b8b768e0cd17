package dialect

import (
	"context"
	"fmt"
	"strings"

	"github.com/effectively-once/watermill-inbox/driver"
)

// Speaker is implemented by a dialect that names the server its SQL is written for, so that the inbox can refuse
// a database of another kind with an error that says so, instead of the syntax error of its first statement.
type Speaker interface {
	Speaks() driver.Server
}

// Locator is implemented by a dialect that can tell which database a connection reaches, so that the inbox can
// refuse to join a subscriber's transaction on another database than its own: the claim would find no inbox table
// there, or another inbox's.
type Locator interface {
	// Locate describes the database q reaches, in words fit for an error message: two connections to one
	// database get the same text, and connections to two databases different ones.
	Locate(ctx context.Context, q driver.Executor) (string, error)
}

// AskServer asks the database behind q which server it is, for a pool that cannot tell by itself
// (driver.Identifier). It returns the server, "" when the answer names neither kind, and what to call it in a
// message: "MariaDB 10.11.6", say, or the version as the server gave it.
//
// version() is the one statement both kinds answer alike: PostgreSQL's begins with "PostgreSQL", and its forks
// keep that; MariaDB's names MariaDB; MySQL's is only a version number, such as "8.0.36", as are those of the
// servers that speak its protocol (TiDB's "8.0.11-TiDB-v7.5.0").
func AskServer(ctx context.Context, q driver.Executor) (server driver.Server, name string, err error) {
	var version string
	if err := q.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return "", "", fmt.Errorf("ask the server its version: %w", err)
	}
	switch {
	case strings.HasPrefix(version, "PostgreSQL"):
		if f := strings.Fields(version); len(f) >= 2 {
			return driver.PostgreSQL, f[0] + " " + f[1], nil // without "on x86_64-pc-linux-gnu, compiled by ..."
		}
		return driver.PostgreSQL, version, nil
	case strings.Contains(version, "MariaDB"):
		if i := strings.Index(version, "-MariaDB"); i > 0 {
			version = version[:i] // "10.11.6-MariaDB-0+deb12u1"
		}
		return driver.MySQL, "MariaDB " + version, nil
	case version != "" && version[0] >= '0' && version[0] <= '9':
		return driver.MySQL, "MySQL " + version, nil
	}
	return "", version, nil
}

// TxEnder is implemented by a dialect whose server can end a transaction under a failed statement and run the
// statements after it in autocommit: MySQL and MariaDB roll the whole transaction back on a deadlock, and on a
// lock-wait timeout when innodb_rollback_on_timeout is on. A handler that goes on after such an error would write
// outside any transaction, and the inbox's COMMIT would succeed on nothing; so the inbox runs every handler of such
// a database on a view of its transaction (driver.SharedPool) that, given the test through driver.TxOptions.Ends,
// refuses every statement after it and the commit. PostgreSQL keeps a failed transaction open, refusing every
// statement until it is rolled back, and needs none of this.
type TxEnder interface {
	// EndsTx returns the test, for the server q reaches, of the errors that end a transaction under a statement.
	// The inbox asks once per Database.
	EndsTx(ctx context.Context, q driver.Executor) (func(error) bool, error)
}
