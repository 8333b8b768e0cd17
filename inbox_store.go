package inbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
)

// store holds every query the middleware runs against the inbox table. The table name is validated by
// config.validate and fixed at construction, so each query is formatted once, not per message.
type store struct {
	table       string
	claimSQL    string
	producedSQL string
	saveSQL     string
}

// Savepoint statements, for a claim made inside watermill-sql's subscriber transaction. The name is fixed: the
// middleware never nests them.
const (
	savepointSQL         = `SAVEPOINT watermill_inbox_claim`
	rollbackSavepointSQL = `ROLLBACK TO SAVEPOINT watermill_inbox_claim`
	releaseSavepointSQL  = `RELEASE SAVEPOINT watermill_inbox_claim`
)

func newStore(table string) *store {
	q := func(s string) string { return strings.ReplaceAll(s, "{table}", table) }
	return &store{
		table: table,

		// The claim is the whole deduplication. The primary key (consumer, message_id) makes a second INSERT of
		// the same ID wait for the first transaction to end, then do nothing if it committed: racing copies are
		// serialized by the index, with no lock of ours. RETURNING tells the caller, in the same round trip,
		// whether this transaction owns the row. processed_at comes from the column default, the database clock.
		claimSQL: q(`INSERT INTO {table} (consumer, message_id) VALUES ($1, $2)
			ON CONFLICT (consumer, message_id) DO NOTHING
			RETURNING true`),

		// Runs only on a duplicate, which is rare, so the claim above stays one statement. A new statement takes a
		// new snapshot under READ COMMITTED, so it sees the row whose commit made the claim do nothing.
		producedSQL: q(`SELECT produced FROM {table} WHERE consumer = $1 AND message_id = $2`),

		// Runs only when the handler produced messages, in the claim's transaction, so the stored messages commit
		// with the effect they describe and can be sent again when the router's publish after the commit fails.
		saveSQL: q(`UPDATE {table} SET produced = $3 WHERE consumer = $1 AND message_id = $2`),
	}
}

// claim inserts the row for (consumer, id) in tx and reports whether tx now owns it. false means the message was
// applied before, by a transaction that committed.
func (s *store) claim(ctx context.Context, tx *sql.Tx, consumer, id string) (bool, error) {
	var claimed bool
	err := tx.QueryRowContext(ctx, s.claimSQL, consumer, id).Scan(&claimed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, s.wrap("claim", consumer, id, err)
	}
	return true, nil
}

// produced returns the messages the handler produced when it applied (consumer, id), if any were stored.
func (s *store) produced(ctx context.Context, tx *sql.Tx, consumer, id string) ([]*message.Message, error) {
	var raw []byte
	err := tx.QueryRowContext(ctx, s.producedSQL, consumer, id).Scan(&raw)
	if err != nil {
		return nil, s.wrap("read produced messages", consumer, id, err)
	}
	if raw == nil {
		return nil, nil
	}
	var stored []storedMessage
	if err := json.Unmarshal(raw, &stored); err != nil {
		return nil, fmt.Errorf("inbox: decode produced messages of %s/%s: %w", consumer, id, err)
	}
	msgs := make([]*message.Message, len(stored))
	for i, m := range stored {
		msgs[i] = message.NewMessage(m.UUID, m.Payload)
		msgs[i].Metadata = m.Metadata
	}
	return msgs, nil
}

// saveProduced stores msgs on the claimed row, in the claim's transaction.
func (s *store) saveProduced(ctx context.Context, tx *sql.Tx, consumer, id string, msgs []*message.Message) error {
	stored := make([]storedMessage, len(msgs))
	for i, m := range msgs {
		stored[i] = storedMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	raw, err := json.Marshal(stored)
	if err != nil {
		return fmt.Errorf("inbox: encode produced messages of %s/%s: %w", consumer, id, err)
	}
	if _, err := tx.ExecContext(ctx, s.saveSQL, consumer, id, raw); err != nil {
		return s.wrap("store produced messages", consumer, id, err)
	}
	return nil
}

// storedMessage is a produced message as the produced column keeps it. Payload is base64 in JSON, which keeps
// any bytes intact; the column stays readable for an operator with jsonb operators.
type storedMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  []byte            `json:"payload"`
}

// wrap adds the operation and the row to a driver error, and turns "no such table" into ErrSchemaMissing.
func (s *store) wrap(op, consumer, id string, err error) error {
	if sqlState(err) == "42P01" {
		return fmt.Errorf("inbox: %s %s/%s in table %s: %w: %w", op, consumer, id, s.table, ErrSchemaMissing, err)
	}
	return fmt.Errorf("inbox: %s %s/%s: %w", op, consumer, id, err)
}

// sqlState returns the SQLSTATE code of a PostgreSQL error from any driver that exposes one (lib/pq's *pq.Error
// and pgx's *pgconn.PgError both do), or "" for other errors.
func sqlState(err error) string {
	var e interface{ SQLState() string }
	if errors.As(err, &e) {
		return e.SQLState()
	}
	return ""
}
