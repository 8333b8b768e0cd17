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
