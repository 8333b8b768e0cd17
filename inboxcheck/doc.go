// Package inboxcheck proves, in a test of your own, that your handler under the inbox applies each event once,
// however often and however the broker delivers it. Call Run from a test with your database, your inbox options,
// your handler, a few messages, and two functions over your own tables: one that puts them back in the state
// before the messages, one that reads the state the handler changes.
//
//	func TestWalletCreditsApplyOnce(t *testing.T) {
//		inboxcheck.Run(t, inboxcheck.Config{
//			Database: inbox.OnSQL(db),
//			Handler:  creditWallet,
//			Messages: []*message.Message{deposit("evt-1", 100), deposit("evt-2", 250)},
//			Reset:    func(ctx context.Context) error { _, err := db.ExecContext(ctx, "UPDATE wallets SET balance = 0"); return err },
//			State:    func(ctx context.Context) (any, error) { return balances(ctx, db) },
//		})
//	}
//
// Run first delivers each message once, and takes the state that leaves as the one every way of delivering them
// must leave. It then delivers them again from the same starting state, each way under a consumer name of its
// own, through Watermill's router over its GoChannel (no broker):
//
//   - Sequential: every message several times in a row, as a redelivering broker or a relay that publishes twice
//     does.
//   - Concurrent: every message to several routers at once, as a rebalance that leaves a zombie consumer running
//     does: the copies race for the inbox's row.
//   - Rolled back after the handler: the first attempt of every message fails after the handler returned, before
//     the inbox's commit, as a consumer killed at that moment does; the broker then delivers it again. A handler
//     whose effect is in the inbox's transaction loses it with the rollback; one that wrote elsewhere (on a second
//     connection, through an HTTP call) keeps it, and the redelivery applies it a second time.
//   - Not acked after the commit: the first attempt of every message fails after the inbox committed, as a consumer
//     killed before its ack does; the redelivery must be skipped.
//
// A way that leaves another state than one delivery fails the test, naming the way and both states. Run returns a
// Report of what each way did, for assertions of your own.
//
// Run migrates the inbox table the options name (or the table Config.Table names) and registers four consumer
// names in it per call; use a test database. It runs in a few seconds on a laptop; Config.Timeout bounds each
// delivery, so that a handler that keeps failing fails the test instead of hanging it.
package inboxcheck
