package batch

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// What the engine is built from and works through: its Config, with the Store and the Message that the inbox
// implements, and the Engine that New builds from it.

// Store runs the engine's statements on the inbox table, in a batch's transaction. Each error comes back wrapped
// with the operation and the row, and classified as the inbox classifies it without batching: the engine never
// reads a database's errors itself. The inbox's store implements it.
type Store interface {
	// ClaimBatch claims the sorted, distinct ids of consumer in tx, as applied ('done'), in one statement where the
	// database can, and returns the ones tx now owns.
	ClaimBatch(ctx context.Context, tx driver.Tx, consumer string, ids []string) ([]string, error)
	// ReadFinished returns, by ID, those rows of consumer and ids that are finished: 'done' (applied before) or
	// 'failed' (dead-lettered in lease mode). ok is false when the database cannot read many rows in one
	// statement; nothing was read then.
	ReadFinished(ctx context.Context, tx driver.Tx, consumer string, ids []string) (rows map[string]dialect.StoredRow, ok bool, err error)
	// Holds reports whether tx still has the row of (consumer, id) that it claimed.
	Holds(ctx context.Context, tx driver.Tx, consumer, id string) (bool, error)
	// Unclaim deletes the row tx claimed for (consumer, id) and has not committed.
	Unclaim(ctx context.Context, tx driver.Tx, consumer, id string) error
	// Savepoint sets a member's savepoint (dialect.SetSavepoint), with a statement without arguments run on tx that
	// the pool's driver.TxCaps.DeferExec may hold back for the member's first statement (see deferring), or rolls
	// tx back to the newest one (dialect.RollbackSavepoint).
	Savepoint(ctx context.Context, tx driver.Tx, step dialect.SavepointStep) error
	// SaveProduced stores raw, a member's produced messages as Message.Encode made them (nil for none), with the
	// row claimed in tx. Produced messages the database refuses come back as an error Message.Failed dead-letters.
	SaveProduced(ctx context.Context, tx driver.Tx, consumer, id string, raw []byte) error
	// Explain adds what to do to an error of the database's, when the inbox knows (a pooler that lost a prepared
	// statement), as the store's own errors have it.
	Explain(err error) error
}

// Message is one message on its way through the engine: its handler, and the ways a message ends that batch mode
// shares with the inbox's other modes. The inbox builds one per message; its methods are called on the message's
// goroutine.
type Message interface {
	// Claiming tells that the batch's claim of the message begins now (the observer times the claim from it).
	Claiming()
	// Run runs the message's handler, with tx as its transaction in the handler's context, and returns what the
	// handler returned. A panic goes on through it.
	Run(tx driver.Tx) ([]*message.Message, error)
	// Encode stamps the messages the handler produced with their identities and returns them as the row stores
	// them (nil for none), or an error Failed dead-letters.
	Encode(produced []*message.Message) ([]byte, error)
	// Failed returns what the router gets for err, once the member's part is rolled back: the inbox dead-letters
	// a message it can never apply, or holds it back; and tells the observer the message is done.
	Failed(err error) error
	// CommitEnded tells the observer how the batch's commit, begun at start, ended (err), and returns what the router
	// gets: produced, or the commit's error.
	CommitEnded(start time.Time, err error, produced []*message.Message) ([]*message.Message, error)
	// Alone applies the message as without batching, in a transaction of its own.
	Alone() ([]*message.Message, error)
	// Skip ends a message whose row a batch's claim found finished (see Store.ReadFinished) as a copy of it would
	// end alone, without a transaction; or, should the row's produced messages not decode, goes Alone.
	Skip(row dialect.StoredRow) ([]*message.Message, error)
	// LogFields names the message in the engine's logs.
	LogFields() watermill.LogFields
}

// Config is what the engine is built from: the inbox's options and the parts of the inbox it works with.
type Config struct {
	// Size is the most messages a batch holds (WithBatch), at least 1.
	Size int
	// Wait is how long a batch waits to fill while others run (WithBatch); 0 waits not at all.
	Wait time.Duration
	// Concurrency is how many batches at a time let their members use the database (WithBatchConcurrency), at
	// least 1.
	Concurrency int
	// Pool is the pool the batches' transactions are on, for its limit of connections (driver.PoolLimit) and what
	// its transactions can do beyond driver.Tx (driver.TxCapser), which New asks once.
	Pool driver.Pool
	// Begin begins a batch's transaction: one that gives each handler a view of its own when the adapter can
	// (driver.SharedPool).
	Begin func(ctx context.Context) (driver.Tx, error)
	// Store runs the engine's statements.
	Store Store
	// Logger logs what the engine does on its own; nil logs nothing.
	Logger watermill.LoggerAdapter
}

// Engine forms the batches of an inbox's consumers and runs them. It is safe for concurrent use, and holds no
// goroutine while no message is in it.
type Engine struct {
	cfg    Config
	queues sync.Map // consumer name -> *queue: a batch claims the IDs of one consumer
	// caps is what the pool's transactions can do beyond driver.Tx, found once by New, with what the engine
	// cannot use left out (see New); maxConns is the pool's MaxConns (driver.PoolLimit), nil when it cannot tell.
	caps     driver.TxCaps
	maxConns func() int
}

// New returns an engine built from cfg. What the pool's transactions can do it asks here, once: a group of
// functions the pool gives only in part is left out (holding a savepoint back needs DeferExec and EndDeferred;
// pipelining needs ExecPipelined, RollbackToSeat and MemberView), and so is View unless the pool is a
// driver.SharedPool, whose BeginShared begins the transactions that have views.
func New(cfg Config) *Engine {
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	e := &Engine{cfg: cfg}
	if c, ok := cfg.Pool.(driver.TxCapser); ok {
		e.caps = c.TxCaps()
	}
	if _, ok := cfg.Pool.(driver.SharedPool); !ok {
		e.caps.View = nil
	}
	if e.caps.DeferExec == nil || e.caps.EndDeferred == nil {
		e.caps.DeferExec, e.caps.EndDeferred = nil, nil
	}
	if e.caps.ExecPipelined == nil || e.caps.RollbackToSeat == nil || e.caps.MemberView == nil {
		e.caps.ExecPipelined, e.caps.RollbackToSeat = nil, nil
	}
	if l, ok := cfg.Pool.(driver.PoolLimit); ok {
		e.maxConns = l.MaxConns // read at each use: database/sql's SetMaxOpenConns may change it
	}
	return e
}
