// Package batch is the inbox's batch mode (inbox.WithBatch): group commit. Messages of one consumer whose handler
// calls are in flight together share one transaction: one statement claims all their IDs, each handler runs in a
// savepoint of its own, and one commit makes them all durable before any of them is acked.
//
// The engine never spells SQL nor reads a database's errors: its statements go through Store, which the inbox's
// store implements, and what it needs of a message (its handler, the inbox's ways to end it) through Message. Of the
// database client it needs the contracts of package driver: what the pool's transactions can do beyond driver.Tx
// (driver.TxCaps, which New asks the pool for once: View for database/sql's shared transactions, DeferExec,
// ExecPipelined and MemberView for pgx's), driver.View, and driver.PoolLimit.
//
// The path of one message:
//
//  1. Join the consumer's queue (Engine.Apply, admission.go). A message that finds nothing running and nothing
//     waiting goes alone, as without batching (Message.Alone). Otherwise a batch begins as soon as no other batch is
//     claiming its messages (while batches run, after waiting up to the batch wait for it to fill: startReady).
//  2. The batch begins its transaction and claims its IDs, sorted, in one statement (batches sharing IDs lock them
//     in one order; run, admission.go). A message whose row was there already leaves the batch: a finished one (a
//     duplicate) ends at once, its row read in the batch's transaction (readFinished, Message.Skip); one that lease
//     mode holds or left goes the way of a message without batching, as does every message of a batch whose claim
//     failed.
//  3. Run the handler at once (apply, batch.go). Its first use of the transaction waits for the batch's turn
//     (WithBatchConcurrency batches at a time, in the order they began: admission.go) and then for the connection,
//     which one handler holds at a time, and sets its savepoint (on pgx, sent with its first statement); it holds
//     the connection until it returns (member.go). Work before that overlaps the other handlers' and the batches'
//     before it. On pgx the members' first statements go to the server together instead, and each handler gets its
//     answer when the members before it are done (pipeline.go).
//  4. On success, store the produced messages (keep); on an error or a panic, roll back to the savepoint and give
//     the claim back (giveBack, undo), so that only this message is nacked, at once.
//  5. When every handler has finished, the next batch takes the turn (earlier when this one has held it for
//     turnBound while its members still working do not use the connection), and this one commits once (end); the
//     handlers that succeeded return, and the router acks. A commit that fails nacks them all, and nothing of the
//     batch is applied.
//
// The files read from the bottom up, each using only the ones before it: config.go (Config, the Store and Message
// the engine works through, Engine and New), state.go (the types the parts share: queue, batch, member, memberTx,
// line), pipeline.go (the line of a batch that pipelines), member.go (a member's view of the transaction, and
// AloneView), admission.go (the consumer's queue: admission, the turns, and a batch's run, which call one
// another), batch.go (a member's part in its batch: apply, keep, giveBack), engine.go (Apply, and Hold and Pending
// for tests).
package batch
