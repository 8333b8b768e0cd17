package inbox

import (
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/internal/batch"
	"github.com/effectively-once/watermill-inbox/internal/readiness"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// core is what the modes share: the database and the options an Inbox was built with, the store that speaks the
// inbox's SQL, and the state learned as messages go by. Each mode is a file of methods on it (transaction.go,
// joined.go, atcommit.go, batch.go, lease.go) that calls down into the steps the modes share (claim.go,
// fingerprint.go, dlq.go, record.go, readiness.go) and never back up into middleware.go, which picks the mode.
type core struct {
	db            *Database
	cfg           config
	store         *store.Store
	readiness     *readiness.Gate[IDType]
	subscriberTxs subscriberTxs
	batches       *batch.Engine // batch mode's (WithBatch); nil without it
	warnedNoDLQ   atomic.Bool   // warnNoDeadLetter has logged
}

// subscriberTxs remembers, per handler, whether its messages carry a watermill-sql subscriber's transaction, and
// that the transaction is on the inbox's database: a handler reads from one subscriber, so its first message tells.
type subscriberTxs struct {
	carries      sync.Map // handler name → bool
	sameDatabase sync.Map // handler name → struct{}, once checkJoinedDatabase passed
}

// rollbackFailed logs a rollback that failed. Once the message's context has ended (a router closing, a deadline)
// database/sql and the driver end the transaction themselves and report the cancellation, often as a bad
// connection: that is no fault, so it is logged at debug level, not as an error.
func (i *core) rollbackFailed(msg *message.Message, consumer, id, what string, err error) {
	switch {
	case err == nil:
	case msg.Context().Err() != nil:
		i.cfg.logger.Debug("Inbox "+what+" ended with the message's context", logFields(msg, consumer, id).Add(watermill.LogFields{"error": err.Error()}))
	default:
		i.cfg.logger.Error("Inbox "+what+" failed", err, logFields(msg, consumer, id))
	}
}

func logFields(msg *message.Message, consumer, id string) watermill.LogFields {
	return watermill.LogFields{"message_uuid": msg.UUID, "consumer": consumer, "event_id": id}
}

// unusable carries why a message can never be applied, from apply to settle.
type unusable struct{ error }

func (u unusable) Unwrap() error { return u.error }
