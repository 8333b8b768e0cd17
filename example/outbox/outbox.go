package main

import (
	"database/sql"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
)

// The outbox is one watermill-sql topic whose table is renamed from watermill_<topic> to carry the example's prefix.
// Its rows are forwarder envelopes: the Kafka topic to send to, and the message.
const (
	outboxTopic = "events"
	outboxTable = "example_outbox_" + outboxTopic
)

// outboxPublisher returns a publisher that writes to the outbox table on tx, addressed to the Kafka topic given to
// Publish. It is built per message because it is bound to that message's transaction; building it only checks its
// configuration. watermill-sql v4 takes its own executor interface, which TxFromStdSQL adapts the inbox's *sql.Tx
// to: the statements still run on that transaction. EventIDPublisher stamps event_id before the forwarder seals the
// message in its envelope, so every copy the relay ever sends carries the same ID.
func outboxPublisher(tx *sql.Tx) (message.Publisher, error) {
	sqlPub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: outboxQueue{}}, nil)
	if err != nil {
		return nil, fmt.Errorf("outbox publisher: %w", err)
	}
	return inbox.EventIDPublisher(forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: outboxTopic}), ""), nil
}

// newOutboxSubscriber returns the relay's reader of the outbox. SubscribeInitialize creates the outbox table.
func newOutboxSubscriber(db *sql.DB, logger watermill.LoggerAdapter) (*wsql.Subscriber, error) {
	return wsql.NewSubscriber(wsql.BeginnerFromStdSQL(db), wsql.SubscriberConfig{
		ConsumerGroup:  "relay", // unused by outboxQueue, but watermill-sql logs it
		SchemaAdapter:  outboxQueue{},
		OffsetsAdapter: deleteOnAck{},
		// Shorter than the one-second defaults, so the demo takes seconds; a real relay trades these against the
		// load of polling an empty table.
		PollInterval:   50 * time.Millisecond,
		ResendInterval: 50 * time.Millisecond,
		RetryInterval:  100 * time.Millisecond,
	}, logger)
}

// outboxQueue reads watermill-sql's PostgreSQL message table as a queue: the relay takes the oldest row no other
// relay holds, and deleteOnAck deletes it once published. The table, the inserts and the decoding are
// watermill-sql's own.
//
// watermill-sql's default PostgreSQL subscriber keeps an offset per consumer group instead, and to keep rows that
// commit out of order from falling behind that offset it reads a row only once every transaction older than the
// row's has ended, in the whole PostgreSQL cluster (pg_snapshot_xmin). One long transaction anywhere, a bulk load
// or a report in another database, then holds up every event for as long as it runs. A relay needs no global
// order (each event carries its own ID, and Kafka orders per partition at best), so a queue serves it better:
// a row is visible the moment its transaction commits, and a long transaction elsewhere delays nothing.
type outboxQueue struct{}

// outboxTableSchema is watermill-sql's PostgreSQL schema renamed to the outbox's table. outboxQueue delegates all
// but the select to it, so that its zero value is ready to use. The table is created without watermill-sql's
// advisory lock, which serializes creators that race: one process creates it, before any credit, and a lock taken
// outside a transaction would be released as soon as it was granted.
var outboxTableSchema = wsql.DefaultPostgreSQLSchema{
	GenerateMessagesTableName:          func(string) string { return outboxTable },
	InitializeSchemaWithoutTransaction: true,
}

var (
	_ wsql.SchemaAdapter  = outboxQueue{}
	_ wsql.OffsetsAdapter = deleteOnAck{}
)

// SchemaInitializingQueries creates watermill-sql's message table under the outbox's name.
func (outboxQueue) SchemaInitializingQueries(params wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return outboxTableSchema.SchemaInitializingQueries(params)
}

// InsertQuery is watermill-sql's insert into the outbox's table.
func (outboxQueue) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	return outboxTableSchema.InsertQuery(params)
}

// UnmarshalMessage is watermill-sql's decoding of a row that SelectQuery returned.
func (outboxQueue) UnmarshalMessage(params wsql.UnmarshalMessageParams) (wsql.Row, error) {
	return outboxTableSchema.UnmarshalMessage(params)
}

// SelectQuery locks the oldest row no one else holds. One row at a time: watermill-sql hands the ack query every
// row it read, those after a message that was not acked included, so with a batch deleteOnAck could delete a row
// that was never published. SKIP LOCKED lets several relays share the queue without waiting for each other.
func (outboxQueue) SelectQuery(wsql.SelectQueryParams) (wsql.Query, error) {
	return wsql.Query{Query: `SELECT "offset", transaction_id, uuid, payload, metadata FROM ` + outboxTable + `
		ORDER BY "offset" LIMIT 1 FOR UPDATE SKIP LOCKED`}, nil
}

// SubscribeIsolationLevel is READ COMMITTED: the row lock, not a snapshot, keeps two relays off one row.
func (outboxQueue) SubscribeIsolationLevel() sql.IsolationLevel { return sql.LevelReadCommitted }

// deleteOnAck is the offsets adapter of outboxQueue: a published row is deleted, in the transaction that locked
// it, so it is gone exactly when its publish is acked. A relay that dies before that commits nothing, and the row
// is published again: at least once, never lost.
type deleteOnAck struct{}

// AckMessageQuery deletes the row just published.
func (deleteOnAck) AckMessageQuery(params wsql.AckMessageQueryParams) (wsql.Query, error) {
	return wsql.Query{Query: `DELETE FROM ` + outboxTable + ` WHERE "offset" = $1`, Args: []any{params.LastRow.Offset}}, nil
}

// ConsumedMessageQuery is empty: there is nothing to record between reading and acking.
func (deleteOnAck) ConsumedMessageQuery(wsql.ConsumedMessageQueryParams) (wsql.Query, error) {
	return wsql.Query{}, nil
}

// NextOffsetQuery is empty: a queue keeps no offset, and outboxQueue.SelectQuery does not ask for one.
func (deleteOnAck) NextOffsetQuery(wsql.NextOffsetQueryParams) (wsql.Query, error) {
	return wsql.Query{}, nil
}

// SchemaInitializingQueries is empty: there is no offsets table.
func (deleteOnAck) SchemaInitializingQueries(wsql.OffsetsSchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// BeforeSubscribingQueries is empty: there is no consumer group to register.
func (deleteOnAck) BeforeSubscribingQueries(wsql.BeforeSubscribingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}
