package pgxinbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// In batch mode over pgx the members' first statements go to the server together, each behind a savepoint of its
// own, and a member's answer waits until every member before it has finished. These tests gather one batch at a
// time (see oneBatch) and watch, through a pgx tracer, which members' statements ran and in which pipeline.

// oneBatch delivers one message per ID to ib's middleware around h, as one batch: a blocker message, which goes
// alone, holds the consumer's turn on the connection until every member's handler has started, so that the members
// ask for the connection together. ib must batch exactly len(ids) messages, with a long wait, and must not have
// run a batch of 32 or more before: such an inbox fills a batch at half the messages it saw in flight, and the
// members left over from halves would wait out the long wait. It returns each member's error by ID.
//
// When not every handler starts, the test fails and the blocker goes (inboxtest.Gate): its open transaction would
// otherwise hold the test's cleanup (DROP TABLE waits for it) and, through the database's oldest snapshot, every
// other test whose watermill-sql subscriber waits for older transactions to end.
func oneBatch(t *testing.T, ib *inbox.Inbox, ids []string, h message.HandlerFunc) map[string]error {
	t.Helper()
	gate, release := inboxtest.Gate(t)
	blocking := make(chan struct{})
	var started atomic.Int64
	mw := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == "blocker-"+ids[0] {
			close(blocking)
			<-gate
			return nil, nil
		}
		started.Add(1)
		return h(msg)
	})
	blocker := make(chan error, 1)
	go func() { _, err := mw(newMsg("blocker-" + ids[0])); blocker <- err }()
	<-blocking

	errs := map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := mw(newMsg(id))
			mu.Lock()
			errs[id] = err
			mu.Unlock()
		}()
	}
	require.Eventually(t, func() bool { return started.Load() == int64(len(ids)) }, 10*time.Second, time.Millisecond,
		"every member's handler started")
	release()
	require.NoError(t, <-blocker)
	wg.Wait()
	return errs
}

// statementLog is a pgx tracer that records the batch members' statements (sql, whose first argument is the
// member's ID): which ran without error, how often, and which went in one pipeline.
type statementLog struct {
	sql string

	mu        sync.Mutex
	changed   chan struct{} // closed, and replaced, at every statement that ran
	ran       map[string]int
	pipelines [][]string // the IDs of each batch of statements that held more than one of them, in order
}

func newStatementLog(sql string) *statementLog {
	return &statementLog{sql: sql, changed: make(chan struct{}), ran: map[string]int{}}
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	var ids []string
	for _, q := range data.Batch.QueuedQueries {
		if q.SQL == l.sql {
			ids = append(ids, fmt.Sprint(q.Arguments[0]))
		}
	}
	if len(ids) > 1 {
		l.mu.Lock()
		l.pipelines = append(l.pipelines, ids)
		l.mu.Unlock()
	}
	return ctx
}

func (l *statementLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.SQL != l.sql || data.Err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ran[fmt.Sprint(data.Args[0])]++
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *statementLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// waitRan waits up to a few seconds until the statements of every one of ids have run, and reports whether they did.
func (l *statementLog) waitRan(ids []string) bool {
	deadline := time.After(5 * time.Second)
	for {
		l.mu.Lock()
		done := !slices.ContainsFunc(ids, func(id string) bool { return l.ran[id] == 0 })
		changed := l.changed
		l.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-changed:
		case <-deadline:
			return false
		}
	}
}

// pipelineBundle is a bundle whose pool (in mode) traces the members' INSERT into a ledger of its own.
type pipelineBundle struct {
	*testBundle
	ledger string
	insert string // the members' statement: their ID and an amount into the ledger
	log    *statementLog
}

func newPipelineBundle(t *testing.T, mode pgx.QueryExecMode) *pipelineBundle {
	t.Helper()
	inboxtest.SkipWhenShort(t, "PostgreSQL")
	ledger := inboxtest.UniqueName("pipeline_ledger")
	insert := `INSERT INTO ` + ledger + ` (id, amount) VALUES ($1, $2)`
	log := newStatementLog(insert)
	cfg, err := pgxpool.ParseConfig(testDSN())
	require.NoError(t, err)
	cfg.MaxConns = 10
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.ConnConfig.Tracer = log
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := newBundleOn(t, pool)
	_, err = pool.Exec(context.Background(), `CREATE TABLE `+ledger+` (id text PRIMARY KEY, amount int NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE `+ledger) })
	return &pipelineBundle{testBundle: b, ledger: ledger, insert: insert, log: log}
}

// inbox is an inbox over the bundle that batches exactly n messages.
func (b *pipelineBundle) inbox(t *testing.T, n int) *inbox.Inbox {
	t.Helper()
	ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithBatch(time.Minute, n), inbox.WithBatchConcurrency(1))...)
	require.NoError(t, err)
	return ib
}

// ledgerIDs returns the IDs the ledger holds, each once per row.
func (b *pipelineBundle) ledgerIDs(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT id FROM `+b.ledger+` ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// record runs the member's statement on its transaction.
func (b *pipelineBundle) record(msg *message.Message) (string, error) {
	id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
	tx, ok := pgxinbox.TxFromContext(msg.Context())
	if !ok {
		return id, errors.New("no pgx transaction in the handler's context")
	}
	_, err := tx.Exec(msg.Context(), b.insert, id, 1)
	return id, err
}

// requireOnePipeline delivers ids to ib as one batch (oneBatch), around a handler that calls before and then runs
// the member's statement, and requires every member's statement to have gone in one pipeline.
func requireOnePipeline(t *testing.T, b *pipelineBundle, ib *inbox.Inbox, ids []string, before func()) {
	t.Helper()
	for id, err := range oneBatch(t, ib, ids, func(msg *message.Message) ([]*message.Message, error) {
		before()
		_, err := b.record(msg)
		return nil, err
	}) {
		require.NoError(t, err, id)
	}
	require.Equal(t, ids, b.ledgerIDs(t))
	b.log.mu.Lock()
	defer b.log.mu.Unlock()
	require.Len(t, b.log.pipelines, 1, "the members' statements went in more than one pipeline")
	require.ElementsMatch(t, ids, b.log.pipelines[0])
}

func without(ids []string, id string) []string {
	return slices.DeleteFunc(slices.Clone(ids), func(x string) bool { return x == id })
}

func TestBatchPipeline(t *testing.T) {
	t.Parallel()

	t.Run("MembersFirstStatementsShareRoundTrips", func(t *testing.T) {
		t.Parallel()
		var trips tripCounter
		pool := openCountingPool(t, &trips, pgx.QueryExecModeCacheStatement)
		b := newBundleOn(t, pool)
		batch := func(round int) []string {
			return batchIDsOf(fmt.Sprintf("round-%d", round), inbox.MaxBatchSize)
		}
		// Each round has an inbox of its own: one that has run a batch of 64 fills the next at half the messages
		// then in flight, and a share of a round left over would wait out the minute's batch wait (see oneBatch).
		// Its first message, alone, checks the schema, uncounted.
		roundInbox := func(round int) *inbox.Inbox {
			ib, err := pgxinbox.New(pool, b.Options(inbox.WithBatch(time.Minute, inbox.MaxBatchSize), inbox.WithBatchConcurrency(1))...)
			require.NoError(t, err)
			_, err = ib.Middleware(b.Credit(1, nil))(newMsg(fmt.Sprintf("warm-%d", round)))
			require.NoError(t, err)
			return ib
		}
		for _, err := range oneBatch(t, roundInbox(0), batch(0), b.Credit(1, nil)) { // the statements' first preparation
			require.NoError(t, err)
		}

		const rounds = 3
		var counted int64
		for round := 1; round <= rounds; round++ {
			ib := roundInbox(round)
			trips.reset()
			for id, err := range oneBatch(t, ib, batch(round), b.Credit(1, nil)) {
				require.NoError(t, err, id)
			}
			counted += trips.trips.Load()
		}
		messages := rounds * (inbox.MaxBatchSize + 1) // with each round's blocker
		perMessage := float64(counted) / float64(messages)
		t.Logf("%d round trips for %d messages: %.3f a message", counted, messages, perMessage)
		require.Less(t, perMessage, 0.5, "one member after another, each costs a round trip")
		require.Equal(t, (rounds+1)*(inbox.MaxBatchSize+1), b.Balance(t), "each round's members and warm-up message")
	})

	// Members that start their handlers while an earlier batch has the turn wait for it, and all wake when it
	// comes: their statements go in one pipeline, not the first to wake alone and the rest after it.
	t.Run("MembersThatWaitedForTheTurnShareOnePipeline", func(t *testing.T) {
		t.Parallel()
		b := newPipelineBundle(t, pgx.QueryExecModeCacheStatement)
		ib := b.inbox(t, inbox.MaxBatchSize)
		requireOnePipeline(t, b, ib, batchIDsOf("gathered", inbox.MaxBatchSize), func() {})
	})

	// A batch may get the turn before its members reach their statements (here the turn frees while every handler
	// still works). The members then reach the connection one after another, and each would go in a pipeline of
	// its own; the first pipeline instead waits, up to the batch wait, for the members that are still working.
	t.Run("MembersThatReachTheConnectionAfterTheTurnCameShareOnePipeline", func(t *testing.T) {
		t.Parallel()
		b := newPipelineBundle(t, pgx.QueryExecModeCacheStatement)
		ib := b.inbox(t, 8)
		ids := batchIDsOf("late", 8)
		var working atomic.Int64
		go1 := make(chan struct{}, len(ids))
		go func() {
			for working.Load() < int64(len(ids)) {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // oneBatch lets the blocker go: the batch gets the turn
			for range ids {
				go1 <- struct{}{}
				time.Sleep(5 * time.Millisecond)
			}
		}()
		requireOnePipeline(t, b, ib, ids, func() {
			working.Add(1)
			<-go1
		})
	})

	// That wait ends with the batch wait: a member still working then goes in a later pipeline, and the members
	// that reached the connection do not wait for it. Here it works until the others' statements have run.
	t.Run("TheFirstPipelineWaitsForLateMembersNoLongerThanTheBatchWait", func(t *testing.T) {
		t.Parallel()
		b := newPipelineBundle(t, pgx.QueryExecModeCacheStatement)
		ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithBatch(300*time.Millisecond, 8), inbox.WithBatchConcurrency(1))...)
		require.NoError(t, err)
		ids := batchIDsOf("bounded", 8)
		late, others := ids[0], ids[1:]
		var othersRan atomic.Bool
		for id, err := range oneBatch(t, ib, ids, func(msg *message.Message) ([]*message.Message, error) {
			if msg.Metadata.Get(inbox.DefaultIDMetadataKey) == late {
				othersRan.Store(b.log.waitRan(others))
			}
			_, err := b.record(msg)
			return nil, err
		}) {
			require.NoError(t, err, id)
		}
		require.True(t, othersRan.Load(), "the members that reached the connection waited for the late one")
		require.Equal(t, ids, b.ledgerIDs(t))
	})

	// The first member to get its answer heads the line. It waits until every member behind it ran its statement,
	// then fails: its rollback undoes theirs too, and they must run again, once each.
	t.Run("AMemberThatFailsAfterLaterMembersRanLeavesThemAppliedOnce", func(t *testing.T) {
		t.Parallel()
		b, ids, head, errs := headAfterOthers(t, "fails", func(*message.Message, *pipelineBundle) error {
			return errors.New("fails after the members behind it ran")
		})
		require.ErrorContains(t, errs[head], "fails after the members behind it ran")
		for _, id := range without(ids, head) {
			require.NoError(t, errs[id], id)
		}
		require.Equal(t, without(ids, head), b.ledgerIDs(t), "each other member's row once, and none of the failed one's")
		require.Equal(t, len(ids), b.Rows(t, "wallet-credits"), "the blocker's claim and the others'; the failed member gave its back")
	})

	// The head waits until every member behind it ran its statement, then counts the ledger's rows in a second
	// statement: it must see its own row only, and the others must still be applied once each.
	t.Run("AHeadsSecondStatementSeesNothingOfTheMembersBehindIt", func(t *testing.T) {
		t.Parallel()
		seen := -1
		b, ids, _, errs := headAfterOthers(t, "second", func(msg *message.Message, b *pipelineBundle) error {
			tx, _ := pgxinbox.TxFromContext(msg.Context())
			return tx.QueryRow(msg.Context(), `SELECT count(*) FROM `+b.ledger).Scan(&seen)
		})
		require.Equal(t, 1, seen, "the head's second statement sees its own row, none of the members' behind it")
		for _, id := range ids {
			require.NoError(t, errs[id], id)
		}
		require.Equal(t, ids, b.ledgerIDs(t), "every member's row once")
		require.Equal(t, len(ids)+1, b.Rows(t, "wallet-credits"), "the blocker's claim and every member's")
	})

	// Every member runs two statements: each head's second one would roll back the members behind it, and they
	// would run again once for every member before them. After the first time the batch goes one member at a
	// time, so that no member's statement runs more than twice.
	t.Run("MembersWithTwoStatementsRunTheirFirstAtMostTwice", func(t *testing.T) {
		t.Parallel()
		b := newPipelineBundle(t, pgx.QueryExecModeCacheStatement)
		ids := batchIDsOf("two", 8)
		errs := oneBatch(t, b.inbox(t, len(ids)), ids, func(msg *message.Message) ([]*message.Message, error) {
			if _, err := b.record(msg); err != nil {
				return nil, err
			}
			tx, _ := pgxinbox.TxFromContext(msg.Context())
			var n int
			return nil, tx.QueryRow(msg.Context(), `SELECT count(*) FROM `+b.ledger).Scan(&n)
		})
		for _, id := range ids {
			require.NoError(t, errs[id], id)
		}
		require.Equal(t, ids, b.ledgerIDs(t), "every member's row once")
		b.log.mu.Lock()
		defer b.log.mu.Unlock()
		for _, id := range ids {
			require.LessOrEqual(t, b.log.ran[id], 2, "how often %s's statement ran", id)
		}
	})

	// One member's INSERT violates the ledger's key (its row is there already). Where its statement fails inside a
	// pipeline, the statements behind it do not run; they must run again, and only that member is nacked. Its
	// place in the pipeline is not the test's to choose, so rounds repeat until it was in the middle of one.
	for name, mode := range queryExecModes {
		t.Run("AMemberWhoseStatementFailsInAPipelineIsNackedAlone_"+name, func(t *testing.T) {
			t.Parallel()
			b := newPipelineBundle(t, mode)
			const members = 8
			ib := b.inbox(t, members)
			inTheMiddle := false
			for round := 0; round < 20 && !inTheMiddle; round++ {
				ids := batchIDsOf(fmt.Sprintf("dup-%d", round), members)
				dup := ids[members/2]
				_, err := b.pool.Exec(context.Background(), b.insert, dup, 100)
				require.NoError(t, err)
				errs := oneBatch(t, ib, ids, func(msg *message.Message) ([]*message.Message, error) {
					_, err := b.record(msg)
					return nil, err
				})
				require.ErrorContains(t, errs[dup], "duplicate key", "round %d", round)
				for _, id := range without(ids, dup) {
					require.NoError(t, errs[id], "round %d: %s", round, id)
				}
				var rows int
				require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+b.ledger+
					` WHERE id LIKE $1 || '%' AND amount = 1`, fmt.Sprintf("dup-%d-", round)).Scan(&rows))
				require.Equal(t, members-1, rows, "round %d: each other member's row once", round)

				b.log.mu.Lock()
				for _, p := range b.log.pipelines {
					if k := slices.Index(p, dup); k >= 0 && k < len(p)-1 {
						inTheMiddle = true
					}
				}
				b.log.mu.Unlock()
			}
			require.True(t, inTheMiddle, "in some round the failing statement had others behind it in its pipeline")
		})
	}
}

// headAfterOthers runs one batch of 8 members that each record their row. The first to get its answer heads the
// line: it waits until the statement of every member behind it has run, then returns what then does. It returns the
// bundle, the members' IDs, the head's, and each member's error.
func headAfterOthers(t *testing.T, prefix string, then func(*message.Message, *pipelineBundle) error) (
	b *pipelineBundle, ids []string, head string, errs map[string]error,
) {
	t.Helper()
	b = newPipelineBundle(t, pgx.QueryExecModeCacheStatement)
	ids = batchIDsOf(prefix, 8)
	var first atomic.Value
	var othersRan atomic.Bool
	errs = oneBatch(t, b.inbox(t, len(ids)), ids, func(msg *message.Message) ([]*message.Message, error) {
		id, err := b.record(msg)
		if err != nil || !first.CompareAndSwap(nil, id) {
			return nil, err
		}
		othersRan.Store(b.log.waitRan(without(ids, id)))
		return nil, then(msg, b)
	})
	require.True(t, othersRan.Load(), "the members behind the head ran their statements before it went on")
	head, _ = first.Load().(string)
	return b, ids, head, errs
}

// batchIDsOf returns n event IDs that sort in the order they are numbered.
func batchIDsOf(prefix string, n int) []string {
	ids := make([]string, n)
	for k := range ids {
		ids[k] = fmt.Sprintf("%s-%02d", prefix, k)
	}
	return ids
}
