package main

import (
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql" // named sql, as in the README
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
)

// The outbox snippet of docs/guides/modes.md, verbatim, for the compiler (see the root's TestREADME_EverySnippetIsCompiledCode).
// The function is compiled, never called.
func readmeOutbox(msg *message.Message, event *message.Message, logger watermill.LoggerAdapter) error {
	tx, _ := inbox.TxFromContext(msg.Context())
	outbox, _ := sql.NewPublisher(sql.TxFromStdSQL(tx), sql.PublisherConfig{SchemaAdapter: sql.DefaultPostgreSQLSchema{}}, logger)
	pub := inbox.EventIDPublisher(forwarder.NewPublisher(outbox, forwarder.PublisherConfig{ForwarderTopic: "outbox"}), "")
	err := pub.Publish("credited", event)
	return err
}

var _ = readmeOutbox
