package main

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
	_ "github.com/lib/pq"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// target is the database a DSN names: the database/sql driver and DSN to open it with, and the inbox's dialect.
type target struct {
	name   string // for messages: "PostgreSQL", "MariaDB or MySQL"
	driver string
	dsn    string
	// database returns the inbox's view of db, in the dialect of its kind.
	database func(db *sql.DB) *inbox.Database
}

var errDSNForm = errors.New("want a postgres:// or postgresql:// URL, libpq's key=value form (host=... dbname=...), " +
	"a mysql:// URL, or go-sql-driver's form (user:pass@tcp(host:3306)/db)")

// parseDSN tells which database dsn names from its form, and returns how to open it. An empty DSN is PostgreSQL
// through libpq's environment variables (PGHOST, PGUSER, ...). Errors never repeat the DSN: it may hold a password.
func parseDSN(dsn string) (target, error) {
	postgres := target{name: "PostgreSQL", driver: "postgres", dsn: dsn, database: inbox.OnSQL}
	mariadb := target{name: "MariaDB or MySQL", driver: "mysql", database: mysqlinbox.Database}
	scheme, _, isURL := strings.Cut(dsn, "://")
	switch {
	case dsn == "":
		return postgres, nil
	case isURL && (scheme == "postgres" || scheme == "postgresql"):
		if _, err := url.Parse(dsn); err != nil {
			return target{}, fmt.Errorf("not a URL: %w", errDSNForm) // lib/pq's error would quote the DSN
		}
		return postgres, nil
	case isURL && scheme == "mysql":
		cfg, err := mysqlURL(dsn)
		if err != nil {
			return target{}, err
		}
		mariadb.dsn = cfg.FormatDSN()
		return mariadb, nil
	case isURL:
		return target{}, fmt.Errorf("unknown scheme %q: %w", scheme, errDSNForm)
	case strings.Contains(dsn, "@tcp(") || strings.Contains(dsn, "@unix(") || strings.HasPrefix(dsn, "tcp(") ||
		strings.HasPrefix(dsn, "unix("):
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return target{}, fmt.Errorf("not a DSN go-sql-driver/mysql reads: %w", errDSNForm)
		}
		mariadb.dsn = cfg.FormatDSN()
		return mariadb, nil
	case strings.Contains(dsn, "="):
		return postgres, nil // libpq's key=value form; lib/pq reports a malformed one when it connects
	}
	return target{}, errDSNForm
}

// mysqlURL reads a mysql://user:pass@host:port/db?param=value URL as go-sql-driver/mysql's configuration; the
// parameters are go-sql-driver's (parseTime, tls, ...).
func mysqlURL(dsn string) (*mysql.Config, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %w", errDSNForm) // url's error would quote the DSN
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, errors.New("a mysql:// URL names its database as its path: mysql://user:pass@host:3306/db")
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, db
	if u.Port() == "" && u.Host != "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	if len(u.Query()) > 0 {
		// go-sql-driver applies its parameters as it parses its own form: let it, on a DSN without secrets.
		parsed, err := mysql.ParseDSN("/" + db + "?" + u.RawQuery)
		if err != nil {
			return nil, fmt.Errorf("the parameters of the mysql:// URL: %w", err)
		}
		parsed.User, parsed.Passwd, parsed.Net, parsed.Addr = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr
		cfg = parsed
	}
	return cfg, nil
}
