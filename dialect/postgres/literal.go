package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Over lib/pq a statement with arguments costs two round trips: lib/pq has the server parse and describe it (an
// unnamed prepared statement), then binds the arguments and executes it. A statement without arguments goes as one
// simple query, one round trip. On a message's path (BEGIN, claim, the handler's statement, COMMIT) that second
// trip of the claim is a fifth of what a message waits for, so over such a library (driver.LiteralArgs) the
// dialect's per-message statements go with their arguments written into their text.
//
// The server sees the same statement either way, with untyped literals where the parameters were: PostgreSQL gives
// an untyped literal the type its place wants, as it does a parameter, and parses and plans the statement anew on
// every call, as it does an unnamed prepared statement. Strings go as E'...' literals, whose escapes mean the same
// whatever standard_conforming_strings says, with every backslash and quote doubled. A value no literal can carry
// exactly (a string with a NUL byte, which a simple query cannot hold, or that is not UTF-8; a type not listed
// in literal) sends the statement with its arguments, as before, so that the server judges it as before.

// The statements that open their transaction and run for every message (the claim; lease mode's claim and its
// writes) go further when the transaction can tell its connection (driver.SessionState): the dialect prepares each
// once on the connection's session with SQL's PREPARE, and then
// sends EXECUTE with the literals, still one simple query, which the server neither parses nor plans anew
// (docs/results/performance.md measures what that saves). The PREPARE goes in the first transaction that needs it, and
// stays on the session whatever that transaction's end. Each connection's name for it is its own, random, so that
// no session runs a statement some other connection prepared on it, for another table or search_path, even behind
// a pooler that shares sessions among connections. Behind a pooler in transaction mode a later transaction can
// find a session without it: that EXECUTE fails, the pool stops preparing (SessionLost), and the transaction is
// made again, with literals (dialect.ErrSessionLost): the inbox does that once. Only a statement that opens its
// transaction is prepared, so that the failure comes before anything else of the transaction ran.

// firstRow runs query, the first statement of its transaction, as preparedRow does when it can, and as literally
// does otherwise.
func firstRow(ctx context.Context, ex driver.Executor, query string, args ...any) driver.Row {
	if row, ok := preparedRow(ctx, ex, query, args); ok {
		return row
	}
	return literally(ex).QueryRow(ctx, query, args...)
}

// preparedRow runs query, with args as literals, as a statement prepared on the session of ex's connection, when
// ex keeps notes on its session and every argument has a literal; otherwise it reports false.
func preparedRow(ctx context.Context, ex driver.Executor, query string, args []any) (driver.Row, bool) {
	s, ok := ex.(driver.SessionState)
	if !ok {
		return nil, false
	}
	notes := s.Session()
	if notes == nil {
		return nil, false
	}
	lits := make([]string, len(args))
	for n, a := range args {
		if lits[n], ok = literal(a); !ok {
			return nil, false
		}
	}
	name, known := notes.Load(query)
	if known {
		return lostRow{ex.QueryRow(ctx, "EXECUTE "+name.(string)+"("+strings.Join(lits, ", ")+")"), s}, true
	}
	// The first time on a connection, PREPARE goes with the EXECUTE in one simple query: one round trip, as later.
	// lib/pq returns the rows of the last statement that has some.
	fresh := fmt.Sprintf("watermill_inbox_%016x", rand.Uint64())
	row := ex.QueryRow(ctx, "PREPARE "+fresh+" AS "+query+"; EXECUTE "+fresh+"("+strings.Join(lits, ", ")+")")
	return preparingRow{lostRow{row, s}, func() { notes.Store(query, fresh) }}, true
}

// preparingRow notes its statement as prepared once its row, or its lack of one, proves that PREPARE succeeded. After
// an error it notes nothing, even when only the EXECUTE failed: the next claim on the connection prepares the
// statement again under another name (PREPARE outlives a rollback), which costs the session one statement more, and
// no more than the claims that fail.
type preparingRow struct {
	lostRow
	prepared func()
}

func (r preparingRow) Scan(dest ...any) error {
	err := r.lostRow.Scan(dest...)
	if err == nil || errors.Is(err, driver.ErrNoRows) {
		r.prepared()
	}
	return err
}

// sessionLost turns err, when it says that the session lacked a prepared statement or already had its name, or that
// the statement no longer fits its table (a column's type changed under it: datatype_mismatch, or
// feature_not_supported for a cached plan whose result changed), into dialect.ErrSessionLost, and tells s to keep no
// more notes. Literals fit whatever the table has become.
func sessionLost(s driver.SessionState, err error) error {
	if code := sqlState(err); classify(err) != dialect.StatementMissing && code != "42804" && code != "0A000" {
		return err
	}
	s.SessionLost()
	return fmt.Errorf("%w: %w", dialect.ErrSessionLost, err)
}

type lostRow struct {
	driver.Row
	s driver.SessionState
}

func (r lostRow) Scan(dest ...any) error {
	if err := r.Row.Scan(dest...); err != nil {
		return sessionLost(r.s, err)
	}
	return nil
}

// literally returns ex, or, when ex's library pays a round trip for arguments, ex with its arguments inlined.
func literally(ex driver.Executor) driver.Executor {
	if l, ok := ex.(driver.LiteralArgs); ok && l.LiteralArgs() {
		return inlined{ex}
	}
	return ex
}

type inlined struct{ driver.Executor }

func (e inlined) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if q, ok := inline(query, args); ok {
		return e.Executor.Exec(ctx, q)
	}
	return e.Executor.Exec(ctx, query, args...)
}

func (e inlined) QueryRow(ctx context.Context, query string, args ...any) driver.Row {
	if q, ok := inline(query, args); ok {
		return e.Executor.QueryRow(ctx, q)
	}
	return e.Executor.QueryRow(ctx, query, args...)
}

func (e inlined) Query(ctx context.Context, query string, args ...any) (driver.Rows, error) {
	if q, ok := inline(query, args); ok {
		return e.Executor.Query(ctx, q)
	}
	return e.Executor.Query(ctx, query, args...)
}

// inline writes args into query in place of its parameters $1, $2, ..., and reports false when one of them
// cannot be written as a literal, or query names a parameter args lacks. It skips what a parameter cannot be in:
// quoted literals, quoted identifiers and comments.
func inline(query string, args []any) (string, bool) {
	if len(args) == 0 {
		return query, false
	}
	lits := make([]string, len(args))
	size := len(query)
	for n, a := range args {
		l, ok := literal(a)
		if !ok {
			return "", false
		}
		lits[n] = l
		size += len(l)
	}
	var b strings.Builder
	b.Grow(size)
	for i := 0; i < len(query); {
		c := query[i]
		switch {
		case c == '\'' || c == '"':
			end := strings.IndexByte(query[i+1:], c)
			if end < 0 {
				return "", false
			}
			b.WriteString(query[i : i+end+2])
			i += end + 2
		case c == '-' && strings.HasPrefix(query[i:], "--"):
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				end = len(query) - i
			}
			i += end // the comment is left out
		case c == '$' && i+1 < len(query) && isDigit(query[i+1]):
			j := i + 1
			for j < len(query) && isDigit(query[j]) {
				j++
			}
			n, err := strconv.Atoi(query[i+1 : j])
			if err != nil || n < 1 || n > len(lits) {
				return "", false
			}
			b.WriteString(lits[n-1])
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// literal spells v as a PostgreSQL literal of no type, or reports false. Negative numbers are parenthesized, so
// that a cast after them (-1::int) applies to the whole number.
func literal(v any) (string, bool) {
	switch v := v.(type) {
	case nil:
		return "NULL", true
	case string:
		if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
			return "", false
		}
		var b strings.Builder
		b.Grow(len(v) + 3)
		b.WriteString("E'")
		for i := 0; i < len(v); i++ {
			switch v[i] {
			case '\'':
				b.WriteString("''")
			case '\\':
				b.WriteString(`\\`)
			default:
				b.WriteByte(v[i])
			}
		}
		b.WriteByte('\'')
		return b.String(), true
	case bool:
		return strconv.FormatBool(v), true
	case int:
		return number(int64(v)), true
	case int16:
		return number(int64(v)), true
	case int32:
		return number(int64(v)), true
	case int64:
		return number(v), true
	}
	return "", false
}

func number(n int64) string {
	if n < 0 {
		return "(" + strconv.FormatInt(n, 10) + ")"
	}
	return strconv.FormatInt(n, 10)
}
