package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// The state that the engine's parts share: a consumer's queue, a batch and its transaction, the batch's members,
// each member's view of the transaction, and the line of a batch that pipelines. The files above this one give
// them their behaviour.

// queue forms the batches of one consumer from the messages that wait for one.
type queue struct {
	e        *Engine
	consumer string

	mu      sync.Mutex
	pending []*member // in no batch yet, oldest first
	running int       // batches (and lone messages) whose handlers have not all returned
	// Batches whose members may use the connection (at most WithBatchConcurrency), and those that wait for that
	// turn, oldest first. See startReady.
	using   int
	gated   []*batch
	forming bool // a batch is claiming its messages: the messages that arrive meanwhile go in the next
	// alone is the ID of the lone message that runs (takeAlone), if one does. Its copies wait for it to end: a
	// batch that claimed one first would hold the row the lone message's claim waits for, while it waits for the
	// turn the lone message holds, and neither would ever go on. IDs are never empty.
	alone  string
	held   bool // no batch begins (tests hold the queue to gather a batch)
	timer  *time.Timer
	timerN int  // which arming of the timer is current, so that a stale firing does nothing
	waited bool // the current wait to fill a batch is over
	// lead is how long members' handlers have been working before their first use of the transaction (or
	// before they returned without one), averaged over the recent members, in nanoseconds; 0 until one is known.
	// See startReady.
	lead atomic.Int64
	// inFlight counts the consumer's messages in the inbox, from Apply's start to its return; recent is
	// how many were there when the last batch's handlers had all returned, before its commit. See startReady.
	inFlight atomic.Int32
	recent   int
}

// learn folds into lead how long one member's handler worked before it used the transaction.
func (q *queue) learn(d time.Duration) {
	d = max(d, 1)
	old := q.lead.Load()
	if old != 0 {
		d = time.Duration(old) + (d-time.Duration(old))/4
	}
	q.lead.Store(int64(d)) // a store lost to another member's costs one sample of an average
}

// heldTurn is a turn on the connection that a batch or a lone message holds. It is given up once (passed): when
// its holder ends, or earlier when the holder has held it for turnBound and, for a batch, none of its members uses
// or waits for the connection (see hold). Guarded by the queue's mu.
type heldTurn struct {
	timer  *time.Timer
	passed bool
}

// batch is one transaction that the messages it claimed share.
type batch struct {
	e        *Engine
	store    Store
	q        *queue
	consumer string
	tx       driver.Tx
	ctx      context.Context // the batch's own: no member's context ends it

	conn sync.Mutex // the transaction's one connection: one member at a time (without pipe)
	// solo is a batch of one: its member needs no savepoint, since a failure rolls back the whole transaction,
	// which holds nothing else. A lone message so costs what it costs without batching.
	solo bool
	// pipe, when the transaction can pipeline (pgx's: driver.TxCaps.ExecPipelined) and the batch has more than one
	// member, sends the members' first statements together, and line orders the members on the connection
	// instead of conn.
	pipe  bool
	line  line
	seats atomic.Int32 // members that asked for their native transaction, numbering their savepoints

	ready   chan struct{} // closed when the members may use the connection (formed, passTurn)
	members int           // claimed members
	atTurn  atomic.Int32  // members that wait for the turn, or finished without needing it
	// gather is how many members the batch's first pipeline waits for (see admit and send), until gatherBy
	// when that is set. Set before ready closes.
	gather   int
	gatherBy time.Time
	admitted bool         // ready is closed; guarded by the queue's mu
	turnHeld *heldTurn    // the turn it was admitted with; guarded by the queue's mu
	asked    atomic.Int32 // members that asked for the connection and have not released it
	late     atomic.Bool  // it has held its turn for turnBound (see hold)

	mu     sync.Mutex
	left   int       // claimed members still running their handler
	ok     []*member // members whose handler succeeded, waiting for the commit
	broken error     // what left the transaction unusable, if anything did
	done   chan struct{}
}

// breaks records that the transaction can no longer commit.
func (b *batch) breaks(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.broken == nil {
		b.broken = err
	}
}

// brokenBy returns what left the transaction unusable, nil if nothing did.
func (b *batch) brokenBy() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.broken
}

// member is one message's part in a batch. It is allocated once, with its view of the transaction and the one
// channel that everything the member waits for arrives on.
type member struct {
	msg Message
	ctx context.Context // the message's, when it joined the queue
	id  string
	// signals carries, in this order, the member's turn (the batch that claimed the message, or nil: it goes on
	// alone), the wake-ups of its view in a pipelining batch (memberTx.signal), and the batch's commit, for a member
	// whose handler succeeded. A wake-up never blocks its sender and may be left over; await skips it.
	signals chan memberSignal
	// row is, for a member that goes on without its batch, the row the batch's claim found there when it is
	// finished ('done': a copy of an applied message; 'failed': dead-lettered in lease mode), read in the batch's
	// transaction (readFinished); set before the turn is sent.
	row *dialect.StoredRow
	tx  memberTx // its view, once a batch claimed it
}

// memberSignal is one thing a member waits for; the zero value is a wake-up.
type memberSignal struct {
	kind signalKind
	b    *batch        // with signalTurn: the batch, or nil
	out  commitOutcome // with signalCommit
}

type signalKind uint8

const (
	signalWake signalKind = iota
	signalTurn
	signalCommit
)

// await returns the next signal of kind, skipping the wake-ups left over before it.
func (m *member) await(kind signalKind) memberSignal {
	for {
		if s := <-m.signals; s.kind == kind {
			return s
		}
	}
}

// commitOutcome is how a batch's commit ended.
type commitOutcome struct {
	start time.Time
	err   error
}

// memberTx is a member's view of the batch's transaction, in its handler's context: the first use takes the
// connection and sets the member's savepoint, so that the handler's time before it overlaps the others'.
type memberTx struct {
	b         *batch
	start     time.Time // the handler's start
	once      sync.Once
	savepoint bool  // set: its effect can be rolled back alone
	deferred  bool  // the savepoint waits to go with the member's first statement (driver.TxCaps.DeferExec)
	err       error // setting it failed
	untouched bool  // the member finished without taking the connection

	vmu      sync.Mutex // guards view and returned, which a goroutine of the handler's may reach after it returned
	returned bool       // the handler returned (end): its view refuses every statement
	// takes and pipes are what the view's uses do, set when it is made: take the connection (Take), and send the
	// first statement in a pipeline (First).
	takes, pipes bool

	// In a batch with a pipe: pipelined is set when the member's first statement went in a pipeline; the other
	// fields are the line's (guarded by its mu).
	pipelined bool
	view      driver.View       // the native transaction its handler gets, when the batch's transaction gives views
	seat      int               // names the savepoint of its pipelined statement
	wake      chan memberSignal // its member's signals, in a batch with a pipe
	sql       string            // its first statement, while it waits in the line's queue
	args      []any
	alone     bool // it waits in the queue to have the connection to itself, not to pipeline a statement
	sends     bool // it is to send the next pipeline
	ran       bool // its savepoint and statement ran (spSet: the savepoint is there), with res and resErr
	spSet     bool
	res       any
	resErr    error
	told      bool // it heads the line and has its answer
}

// line orders the members of a pipelining batch on its connection.
type line struct {
	mu       sync.Mutex
	order    []*memberTx // members whose statements ran or are running, in that order; the first is the head
	queue    []*memberTx // members that wait to send their first statement or to take the connection, in order
	busy     bool        // a pipeline is on the connection, or holder has it
	holder   *memberTx   // the head, which has the connection to itself until it leaves the line
	claimant *memberTx   // the head, waiting for a pipeline to end to take the connection
	failed   *memberTx   // its pipelined statement failed: nothing is sent until it leaves the line
	joined   int         // members that joined the queue, or finished without the connection (arrive)
	gathered bool        // the batch's first pipeline went, or is going
	gatherer *memberTx   // the sender of the first pipeline, while it waits for the members to gather
	// serial: a head's later statement rolled back the members behind it. Its handlers are of the kind that runs
	// more than one statement (or produces messages): the members now go one after another, each sent when the
	// line is empty, so that the batch pays for that rollback, and the statements run again, once only.
	serial bool

	// What the sender of a pipeline hands the transaction, reused: only one pipeline is on the connection.
	seats   []int
	sqls    []string
	args    [][]any
	results []any
	errs    []error
}
