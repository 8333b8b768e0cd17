package inbox

import (
	"sync"
	"sync/atomic"

	"github.com/effectively-once/watermill-inbox/internal/batch"
	"github.com/effectively-once/watermill-inbox/internal/readiness"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// core is what the modes share: the database and the options an Inbox was built with, the store that speaks the
// inbox's SQL, and the state learned as messages go by. Each mode is a file of methods on it (transaction.go,
// joined.go, atcommit.go, batch.go, lease.go) that calls down into the steps the modes share (readiness.go, claim.go,
// dlq.go) and never back up into middleware.go, which picks the mode.
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
