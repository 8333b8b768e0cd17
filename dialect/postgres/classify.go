package postgres

import (
	"errors"
	"strings"

	"github.com/effectively-once/watermill-inbox/dialect"
)

// Classify reads the SQLSTATE that PostgreSQL drivers expose (lib/pq's *pq.Error and pgx's *pgconn.PgError both
// have a SQLState method).
func (*postgres) Classify(err error) dialect.ErrorKind { return classify(err) }

func classify(err error) dialect.ErrorKind {
	code := sqlState(err)
	switch {
	case code == "42P01": // undefined_table
		return dialect.NoTable
	// division_by_zero, which only the check of the session's encoding raises (sessionUTF8SQL)
	case code == "22012":
		return dialect.ClientEncoding
	// character_not_in_repertoire and untranslatable_character: for text the inbox checked as UTF-8, the server read
	// it in the session's other encoding before that check could run and found no character for its bytes (or, in a
	// database of an encoding other than UTF8 and SQL_ASCII, has none for one of its characters)
	case code == "22021" || code == "22P05":
		return dialect.Untranslatable
	// invalid_text_representation (a uuid column), program_limit_exceeded (index row size)
	case code == "22P02" || code == "54000":
		return dialect.IDRefused
	case code == "2200H": // sequence_generator_limit_exceeded: the consumers' smallint ids are all taken
		return dialect.SequenceExhausted
	// data exceptions, other limits, a check constraint
	case strings.HasPrefix(code, "22") || strings.HasPrefix(code, "54") || code == "23514":
		return dialect.ValueRefused
	case code == "40001": // serialization_failure
		return dialect.SerializationFailure
	case code == "40P01" || code == "55P03": // deadlock_detected, lock_not_available (a lock_timeout)
		return dialect.LockConflict
	case code == "26000" || code == "42P05": // invalid_sql_statement_name, duplicate_prepared_statement
		return dialect.StatementMissing
	// not_null_violation: no statement of the inbox writes NULL to a NOT NULL column but a claim whose check of
	// the consumer's id gave none (claimSQL)
	case code == "23502":
		return dialect.StaleConsumer
	}
	return dialect.Other
}

// sqlState returns the SQLSTATE code of a PostgreSQL error from any driver that exposes one, or "" for other
// errors.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}
