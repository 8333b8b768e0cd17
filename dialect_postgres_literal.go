package inbox

import (
	"context"
	"strconv"
	"strings"
	"unicode/utf8"

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
