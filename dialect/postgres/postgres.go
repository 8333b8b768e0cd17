// Package postgres is the inbox's PostgreSQL dialect: every statement the inbox runs on PostgreSQL, its versioned
// migrations (migrations/*.sql, the files users may hand to a migration tool of their own) and the schema the
// inbox expects them to leave. The inbox's On uses it; OnDialect takes it, or another database's dialect.
//
// Statements are named constants, each with a comment on why it has its shape, written for the default inbox
// table with {table} in its place; the dialect expands them once per table and keeps the result (expand).
package postgres

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Dialect returns a PostgreSQL dialect. Each one keeps the statements it expands for the tables it is asked about,
// so each Database holds its own: nothing is shared across the process.
func Dialect() dialect.Dialect { return &postgres{} }

// The contracts the inbox finds by type assertion: a rename would switch the feature off without a word.
var (
	_ dialect.Dialect         = (*postgres)(nil)
	_ dialect.Speaker         = (*postgres)(nil)
	_ dialect.Locator         = (*postgres)(nil) // the check of a joined transaction's database
	_ dialect.AtCommitClaimer = (*postgres)(nil)
	_ dialect.RowsReader      = (*postgres)(nil)
	_ dialect.SpanCleaner     = (*postgres)(nil)
	_ dialect.Partitioner     = (*postgres)(nil)
)

type postgres struct {
	mu         sync.RWMutex
	statements map[statementKey]string // what expand made
	batches    sync.Map                // batchKey -> string: the batch claim of one table and size
	reads      sync.Map                // batchKey -> string: ReadRows of one table and count of IDs
}

// statementKey names a statement expanded for one table, one relation of it that a cleanup walks, and the way the
// statement reads the event ID it is sent after a handler ran (sentID).
type statementKey struct{ template, table, rel, id string }

// sql returns the statement template for table.
func (pg *postgres) sql(template, table string) string {
	return pg.expand(template, table, table, idAsText)
}

// withID returns the statement template for table, which reads the event ID as {id}, and the argument to send as
// that ID: see sentID.
func (pg *postgres) withID(template, table, id string) (query string, arg any) {
	expr, arg := sentID(id)
	return pg.expand(template, table, table, expr), arg
}

// expand is the one step that puts names into the dialect's statements, once for each statement and table, then
// from memory: {table} becomes the inbox table's name, {rel} the relation a cleanup walks (the table, or one of
// its partitions), and {now_minutes} the database clock as processed_at stores it. Names go in as quoted
// identifiers (fill).
func (pg *postgres) expand(template, table, rel, id string) string {
	key := statementKey{template, table, rel, id}
	pg.mu.RLock()
	s, ok := pg.statements[key]
	pg.mu.RUnlock()
	if ok {
		return s
	}
	s = fill(template, map[string]string{"table": table, "rel": rel}, "{now_minutes}", nowMinutesSQL,
		"{utf8}", sessionUTF8SQL, "{id}", id)
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.statements == nil {
		pg.statements = map[statementKey]string{}
	}
	pg.statements[key] = s
	return s
}

// namePlaceholder is a name in a statement template: {table}, {rel}, {partition} or {default}, with the suffix
// that makes it the name of a side table, an index or a function ({table}_consumers).
var namePlaceholder = regexp.MustCompile(`\{(table|rel|partition|default)\}([a-z_]*)`)

// fill is the dialect's one way of putting names into its statements: each name placeholder becomes the name
// names gives it, with its suffix, as a quoted identifier; then each other placeholder of pairs (given as
// placeholder, text) becomes its text, which is SQL of the dialect's own or a bound checked by its caller. The
// names were validated (lower-case letters, digits and underscores) or read from the catalog; quoting them makes
// them mean exactly themselves either way.
func fill(template string, names map[string]string, pairs ...string) string {
	s := namePlaceholder.ReplaceAllStringFunc(template, func(m string) string {
		sub := namePlaceholder.FindStringSubmatch(m)
		return quoteIdent(names[sub[1]] + sub[2])
	})
	if len(pairs) == 0 {
		return s
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

// sessionUTF8SQL is 1 on a session whose text parameters reach the table as the inbox sent them, and 0 on one whose
// client_encoding would convert them: the inbox sends UTF-8, as lib/pq and pgx do, and a session switched to another
// encoding (SET client_encoding, by a handler or a pool hook on a pooled connection) would have the server read the
// bytes of an event ID in that encoding and store another ID, which could then meet another message's row. The
// statements that send an ID divide the consumer's id by it: division_by_zero, which no other statement of the
// inbox can raise, is Classify's ClientEncoding, before anything is written. A SQL_ASCII database converts nothing.
const sessionUTF8SQL = `(current_setting('client_encoding') = 'UTF8' OR current_setting('server_encoding') = 'SQL_ASCII')::int`

// The check runs only once a statement's parameters were read, and a text parameter the session's encoding cannot
// read fails earlier, while it is bound: on a claim, whose one text is the ID, that is the session's fault too. The
// statements after a handler, which may have switched the session, must meet the check whatever the session: they
// read the ID as {id} (sentID) and the error text from a bytea (asBytes), so that binding converts nothing it could
// fail on, and what convert_from or jsonb then refuses is the value's own fault.
const (
	idAsText  = `$2`                              // the ID sent as text, of message_id's type (text or uuid)
	idAsBytes = `convert_from($2::bytea, 'UTF8')` // the ID sent as UTF-8 bytes, into text
)

// sentID returns how a statement after a handler reads the event ID in $2, and the argument to send. An ASCII ID goes
// as text, which every client encoding reads as itself and which takes message_id's type, text or uuid; any other
// goes as bytes, which no client encoding reads at all, and can only be the ID of a text column (a uuid is ASCII).
func sentID(id string) (expr string, arg any) {
	for i := range len(id) {
		if id[i] >= utf8.RuneSelf {
			return idAsBytes, []byte(id)
		}
	}
	return idAsText, id
}

// nowMinutesSQL is the database clock as processed_at stores it: whole minutes since 1970, rounded down.
const nowMinutesSQL = `(floor(extract(epoch FROM now()) / 60))::integer`

// minutes is t as a cutoff on processed_at: a row of minute m holds times up to the end of that minute, so it is
// older than t only when m is before t's minute.
func minutes(t time.Time) int64 {
	return int64(math.Floor(float64(t.Unix()) / 60))
}

// States are one byte in the table (migrations/007_compact.up.sql); the inbox names them.
var stateCodes = map[string]string{"done": "d", "applying": "a", "processing": "p", "released": "r", "failed": "f"}

func stateCode(name string) string {
	if c, ok := stateCodes[name]; ok {
		return c
	}
	return name
}

func stateName(code string) string {
	for name, c := range stateCodes {
		if c == code {
			return name
		}
	}
	return code
}

func (*postgres) Name() string { return "postgres" }

// The dialect's concerns are all the dialect itself.
func (pg *postgres) Claims() dialect.Claims           { return pg }
func (pg *postgres) Leases() dialect.Leases           { return pg }
func (pg *postgres) Locks() dialect.Locks             { return pg }
func (pg *postgres) Maintenance() dialect.Maintenance { return pg }
func (pg *postgres) Schema() dialect.Schema           { return pg }

// Speaks is PostgreSQL (dialect.Speaker).
func (*postgres) Speaks() driver.Server { return driver.PostgreSQL }

// locateSQL names the database and its server's start time.
const locateSQL = `SELECT current_database(), pg_postmaster_start_time()::text`

// Locate names the database and tells its server by the server's start time rather than by its address: one
// server reached by two routes (a socket, a pooler, another interface) answers two addresses, but one start time.
// Only a restart changes it, and the inbox asks again when two answers differ.
func (*postgres) Locate(ctx context.Context, q driver.Executor) (string, error) {
	var name, started string
	if err := q.QueryRow(ctx, locateSQL).Scan(&name, &started); err != nil {
		return "", fmt.Errorf("ask which database this is: %w", err)
	}
	return fmt.Sprintf("database %q of the server started at %s", name, started), nil
}

// JoinsSubscriberTx is true: a deferred constraint trigger (migrations/003_applying_guard.up.sql) fails a commit
// that would keep an unfinished claim.
func (*postgres) JoinsSubscriberTx() bool { return true }

// scanTrue scans a row that is there when a statement took effect, and nothing when it did not.
func scanTrue(row driver.Row) (bool, error) {
	var ok bool
	return dialect.Found(row, &ok)
}

// nullable turns no produced messages into SQL NULL, and others into a bytea parameter, which the statements turn
// into jsonb with convert_from: bytea's text form is ASCII and its binary form raw bytes, so no client_encoding of
// the session changes it on the way (a text parameter would be read in that encoding), and convert_from checks it is
// UTF-8. A nil slice would be an empty bytea, not NULL.
func nullable(raw []byte) any {
	if raw == nil {
		return nil
	}
	return raw
}

// asBytes sends a stored error text in a bytea parameter, for a statement that reads it with
// convert_from($n::bytea, 'UTF8'): see nullable and sessionUTF8SQL. Any other value is sent as it is.
func asBytes(v any) any {
	if s, ok := v.(string); ok {
		return []byte(s)
	}
	return v
}

// quoteIdent spells name as a PostgreSQL quoted identifier: in double quotes, each double quote in it doubled. Such an
// identifier means exactly its characters, whatever they are, and never ends early. (The dialect's package may
// not import a client library, whose quoting functions do the same.)
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
