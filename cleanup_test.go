package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
	"github.com/effectively-once/watermill-inbox/observe"
)

// insertAged inserts n rows of consumer in state (spelled out, as the view shows it), their processed_at age ago,
// one millisecond apart from each other (older as the number grows) in groups of tie rows that share a timestamp,
// as rows of one transaction do; the table keeps the minute each falls in. IDs are prefix-1 to prefix-n. The
// consumer is registered if it is not yet, and its created_at moved back to its oldest row, as if it had been
// claiming since then. One statement for the rows, so tens of thousands take milliseconds.
func (b *testBundle) insertAged(t testing.TB, consumer, prefix, state string, n int, age time.Duration, tie int) {
	t.Helper()
	oldest := age + time.Duration(n/tie)*time.Millisecond
	id := b.consumerAged(t, consumer, oldest)
	_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state, attempts, processed_at)
		SELECT $1, $2 || '-' || g, $3::text::"char", CASE WHEN $3 = 'd' THEN NULL ELSE 1 END,
			floor(extract(epoch FROM now() - $4 * interval '1 microsecond' - (g / $6) * interval '1 millisecond') / 60)::integer
		FROM generate_series(1, $5::int) g`, id, prefix, stateLetter(t, state), age.Microseconds(), n, tie)
	require.NoError(t, err)
}

// consumerAged registers consumer in the inbox's consumers table if it is not yet, moves its created_at back to
// age ago unless it is older already, and returns its id.
func (b *testBundle) consumerAged(t testing.TB, consumer string, age time.Duration) int {
	t.Helper()
	var id int
	require.NoError(t, b.db.QueryRow(`INSERT INTO `+b.Table+`_consumers AS c (name, created_at)
		VALUES ($1, now() - $2 * interval '1 microsecond')
		ON CONFLICT (name) DO UPDATE SET created_at = least(c.created_at, excluded.created_at)
		RETURNING id`, consumer, age.Microseconds()).Scan(&id))
	return id
}

// stateLetter returns the letter the inbox table stores for a state spelled out.
func stateLetter(t testing.TB, state string) string {
	t.Helper()
	letter, ok := map[string]string{"done": "d", "applying": "a", "processing": "p", "released": "r", "failed": "f"}[state]
	require.True(t, ok, "unknown state %q", state)
	return letter
}

// minutesAgo is an SQL expression for the time d ago as the inbox table's processed_at stores it.
func minutesAgo(d time.Duration) string {
	return fmt.Sprintf("(floor(extract(epoch FROM now() - interval '%d microseconds') / 60))::integer", d.Microseconds())
}

// cleanedObserver counts the rows the cleanup reports.
type cleanedObserver struct {
	observe.NopObserver
	cleaned atomic.Int64
	calls   atomic.Int64
}

func (o *cleanedObserver) RowsCleaned(_ context.Context, e observe.CleanupEvent) {
	o.cleaned.Add(e.Rows)
	o.calls.Add(1)
}

const thirtyDays = 30 * 24 * time.Hour

func TestCleanup_DeletesExpiredRowsInBatchesUntilABatchFindsNothing(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	// The article's test: 25,000 expired rows and 100 recent ones, in ties of 3,000 rows that share a timestamp
	// (and so a minute), as rows of one transaction do.
	b.insertAged(t, "wallet-credits", "old", "done", 25_000, thirtyDays, 3_000)
	b.insertAged(t, "wallet-credits", "new", "done", 100, time.Hour, 1)
	// The walk sizes its windows of pages from the planner's rows per page, which autovacuum keeps; a test
	// cannot wait for it.
	_, err := b.db.Exec(`ANALYZE ` + b.Table)
	require.NoError(t, err)

	obs := &cleanedObserver{}
	var batches []int64
	res, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{
		Retention: inbox.DefaultRetention,
		Progress:  func(p inbox.CleanupProgress) { batches = append(batches, p.Deleted) },
	}, inbox.WithTable(b.Table), inbox.WithObserver(obs), inbox.WithLogger(b.Logs))
	require.NoError(t, err)

	// The batches are windows of pages of about a batch of rows each, so their sizes follow the pages; none may
	// exceed the batch size, and together they are every expired row.
	var sum int64
	for _, n := range batches {
		require.LessOrEqual(t, n, int64(inbox.DefaultCleanupBatch), "no batch deletes more than the batch size")
		sum += n
	}
	require.EqualValues(t, 25_000, sum)
	require.GreaterOrEqual(t, len(batches), 3, "25,000 rows take at least three batches of 10,000")
	require.Greater(t, res.Batches, len(batches), "the round ends with a batch that found nothing")
	require.EqualValues(t, 25_000, res.Deleted)
	require.False(t, res.Skipped)
	require.EqualValues(t, 25_000, obs.cleaned.Load())
	require.EqualValues(t, len(batches), obs.calls.Load(), "one report per batch that deleted rows")
	require.Equal(t, 100, b.Rows(t, "wallet-credits"), "the recent rows stay")
	var oldLeft int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+b.Table+`_view WHERE message_id LIKE 'old-%'`).Scan(&oldLeft))
	require.Zero(t, oldLeft)

	finished := b.Logs.Find("Inbox cleanup finished")
	require.Len(t, finished, 1)
	require.Equal(t, int64(25_000), finished[0].Fields["deleted"])
	require.Equal(t, b.Table, finished[0].Fields["table"])

	again, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Zero(t, again.Deleted)
	require.Equal(t, 2, again.Batches, "one statement finds that no page holds an expired row, one that no row is left")
}

func TestCleanup_AgesEachConsumerAndLeaseStateByItsLastChange(t *testing.T) {
	t.Parallel()

	t.Run("DeletesExpiredDoneFailedAndReleasedRowsOfEveryConsumer", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		for _, consumer := range []string{"wallet-credits", "payments", "ledger"} {
			for _, state := range []string{"done", "failed", "released"} {
				b.insertAged(t, consumer, "old-"+state, state, 30, 15*24*time.Hour, 1)
				b.insertAged(t, consumer, "new-"+state, state, 3, 13*24*time.Hour, 1)
			}
		}
		res, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{BatchSize: 7}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.EqualValues(t, 3*3*30, res.Deleted)
		for _, consumer := range []string{"wallet-credits", "payments", "ledger"} {
			require.Equal(t, 9, b.Rows(t, consumer), "rows younger than 14 days stay")
		}
	})

	t.Run("NeverDeletesProcessingRowsAndReportsLeasesAbandonedBeforeTheCutoff", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		// A holder that started 20 days ago with a lease it keeps extending: live, however old its claim.
		payments := b.consumerAged(t, "payments", 20*24*time.Hour)
		_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state, attempts, processed_at, locked_until)
			VALUES ($1, 'live', 'p', 1, `+minutesAgo(20*24*time.Hour)+`, now() + interval '1 minute'),
			       ($1, 'abandoned', 'p', 1, `+minutesAgo(20*24*time.Hour)+`, now() - interval '19 days'),
			       ($1, 'recently-expired', 'p', 2, `+minutesAgo(20*24*time.Hour)+`, now() - interval '1 hour')`, payments)
		require.NoError(t, err)
		b.insertAged(t, "payments", "old", "done", 10, 20*24*time.Hour, 1)

		res, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.Table), inbox.WithLogger(b.Logs))
		require.NoError(t, err)
		require.EqualValues(t, 10, res.Deleted)
		require.EqualValues(t, 1, res.Abandoned, "only the lease that ran out before the cutoff is abandoned")
		require.Equal(t, 3, b.Rows(t, "payments"), "every 'processing' row stays")

		logged := b.Logs.Find("abandoned leases")
		require.Len(t, logged, 1)
		require.Equal(t, "error", logged[0].Level)
		require.ErrorContains(t, logged[0].Err, "1 rows")
	})
}

func TestCleanup_WhileConsumersClaimLosesAndDuplicatesNothing(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	// Work for the cleanup: 20,000 expired rows in batches of 100, so it runs through the claims below.
	b.insertAged(t, "wallet-credits", "old", "done", 20_000, thirtyDays, 1)
	// Lease-mode messages whose last attempt failed long ago: the cleanup may delete them, a copy may claim them
	// again at the same moment, and either way each must be applied once and end 'done'.
	const released = 200
	b.insertAged(t, "payments", "retry", "released", released, thirtyDays, 1)

	txInbox, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"))
	require.NoError(t, err)
	leaseInbox, err := inbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer("payments"), inbox.WithLease(time.Minute))
	require.NoError(t, err)
	var credits atomic.Int64
	credit := txInbox.Middleware(b.Credit(100, &credits))
	var leaseCalls sync.Map // event ID -> *atomic.Int64
	pay := leaseInbox.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		n, _ := leaseCalls.LoadOrStore(msg.Metadata.Get(inbox.DefaultIDMetadataKey), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return nil, nil
	})

	cleanupDone := make(chan inbox.CleanupResult, 1)
	cleanupErr := make(chan error, 1)
	go func() {
		res, err := inbox.OnSQL(b.db).Cleanup(ctx, inbox.CleanupParams{BatchSize: 100}, inbox.WithTable(b.Table))
		cleanupDone <- res
		cleanupErr <- err
	}()

	const messages, workers = 400, 4
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < messages; i += workers {
				for range 2 { // every message arrives twice
					if _, err := credit(newMsg(fmt.Sprintf("evt-%d", i))); err != nil {
						errs <- err
						return
					}
				}
				if i < released {
					if _, err := pay(newMsg(fmt.Sprintf("retry-%d", i+1))); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	res := <-cleanupDone
	require.NoError(t, <-cleanupErr)
	require.Greater(t, res.Batches, 100, "the cleanup ran in many small batches")

	require.EqualValues(t, messages, credits.Load(), "each message applied once")
	require.Equal(t, messages*100, b.Balance(t))
	var newRows, oldRows int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FILTER (WHERE message_id LIKE 'evt-%'),
		count(*) FILTER (WHERE message_id LIKE 'old-%') FROM `+b.Table+`_view WHERE consumer = 'wallet-credits'`).Scan(&newRows, &oldRows))
	require.Equal(t, messages, newRows, "every claimed row is still there")
	require.Zero(t, oldRows, "every expired row is gone")

	for i := 1; i <= released; i++ {
		id := fmt.Sprintf("retry-%d", i)
		n, ok := leaseCalls.Load(id)
		require.True(t, ok, "%s was applied", id)
		require.EqualValues(t, 1, n.(*atomic.Int64).Load(), "%s was applied once", id)
		require.Equal(t, "done", b.stateOf(t, "payments", id), "%s is remembered as done", id)
	}
}

// stateOf returns the state of one row, spelled out as the view shows it, failing the test if it is missing.
func (b *testBundle) stateOf(t testing.TB, consumer, id string) string {
	t.Helper()
	var state string
	require.NoError(t, b.db.QueryRow(`SELECT state FROM `+b.Table+`_view WHERE consumer = $1 AND message_id = $2`, consumer, id).Scan(&state))
	return state
}

func TestCleanup_OneInstanceCleansAtATime(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.insertAged(t, "wallet-credits", "old", "done", 300, thirtyDays, 1)
	ctx := context.Background()

	inFirstBatch := make(chan struct{})
	gate, release := testkit.Gate(t)
	first := make(chan error, 1)
	go func() {
		var once sync.Once
		_, err := inbox.OnSQL(b.db).Cleanup(ctx, inbox.CleanupParams{BatchSize: 100, Progress: func(inbox.CleanupProgress) {
			once.Do(func() { close(inFirstBatch); <-gate })
		}}, inbox.WithTable(b.Table))
		first <- err
	}()
	<-inFirstBatch

	second, err := inbox.OnSQL(b.db).Cleanup(ctx, inbox.CleanupParams{}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.True(t, second.Skipped, "the lock is held by the first cleanup")
	require.Zero(t, second.Deleted)

	release()
	require.NoError(t, <-first)
	third, err := inbox.OnSQL(b.db).Cleanup(ctx, inbox.CleanupParams{}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.False(t, third.Skipped, "the first cleanup released the lock when it finished")
	require.Zero(t, b.Rows(t, "wallet-credits"))
}

func TestCleanup_TheLockIsARowThatRunsOut(t *testing.T) {
	t.Parallel()

	t.Run("ALiveLockOfAnotherInstanceSkipsTheRound", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		b.insertAged(t, "wallet-credits", "old", "done", 10, thirtyDays, 1)
		_, err := b.db.Exec(`INSERT INTO ` + b.Table + `_locks VALUES ('cleanup', gen_random_uuid(), now() + interval '1 minute')`)
		require.NoError(t, err)
		res, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.True(t, res.Skipped)
		require.Equal(t, 10, b.Rows(t, "wallet-credits"))
	})

	t.Run("TheLockOfACleanerThatDiedIsTakenOnceItRanOut", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		b.insertAged(t, "wallet-credits", "old", "done", 10, thirtyDays, 1)
		_, err := b.db.Exec(`INSERT INTO ` + b.Table + `_locks VALUES ('cleanup', gen_random_uuid(), now() - interval '1 second')`)
		require.NoError(t, err)
		res, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.False(t, res.Skipped)
		require.EqualValues(t, 10, res.Deleted)
		var locks int
		require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+b.Table+`_locks`).Scan(&locks))
		require.Zero(t, locks, "the round released its lock")
	})

	t.Run("ACleanerThatLostItsLockStopsBeforeTheNextBatch", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		b.insertAged(t, "wallet-credits", "old", "done", 300, thirtyDays, 1)
		var once sync.Once
		_, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{BatchSize: 100, Progress: func(inbox.CleanupProgress) {
			once.Do(func() { // another instance took the lock over, as after this one stalled past its hold
				_, err := b.db.Exec(`UPDATE ` + b.Table + `_locks SET holder = gen_random_uuid()`)
				require.NoError(t, err)
			})
		}}, inbox.WithTable(b.Table))
		require.ErrorContains(t, err, "another instance took it")
		require.Equal(t, 200, b.Rows(t, "wallet-credits"), "only the batch before the takeover was deleted")
		var locks int
		require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM `+b.Table+`_locks`).Scan(&locks))
		require.Equal(t, 1, locks, "the other instance's lock is left alone")
	})
}

func TestCleanup_ACancelledCleanupReleasesTheLock(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.insertAged(t, "wallet-credits", "old", "done", 300, thirtyDays, 1)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := inbox.OnSQL(b.db).Cleanup(ctx, inbox.CleanupParams{BatchSize: 100, Pause: time.Hour,
		Progress: func(inbox.CleanupProgress) { cancel() }}, inbox.WithTable(b.Table))
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 200, b.Rows(t, "wallet-credits"), "the committed batch stays deleted")

	res, err := inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.EqualValues(t, 200, res.Deleted)
}

func TestCleanup_ReportsAMissingTableAsSuch(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	_, err := inbox.OnSQL(db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(testkit.UniqueName("inbox_test_missing")))
	require.ErrorIs(t, err, inbox.ErrSchemaMissing)
}

func TestCleanup_RejectsInvalidParams(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	for name, p := range map[string]inbox.CleanupParams{
		"NegativeRetention": {Retention: -time.Hour},
		"NegativeBatch":     {BatchSize: -1},
		"HugeBatch":         {BatchSize: inbox.MaxCleanupBatch + 1},
		"NegativePause":     {Pause: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := inbox.OnSQL(db).Cleanup(context.Background(), p)
			require.ErrorIs(t, err, inbox.ErrInvalidOption)
		})
	}
	_, err := inbox.OnSQL(nil).Cleanup(context.Background(), inbox.CleanupParams{})
	require.ErrorIs(t, err, inbox.ErrInvalidOption)
}

func TestCleaner(t *testing.T) {
	t.Parallel()

	t.Run("CleansAtOnceAndStopsWhenItsContextEnds", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		b.insertAged(t, "wallet-credits", "old", "done", 50, thirtyDays, 1)
		obs := &cleanedObserver{}
		cl, err := inbox.OnSQL(b.db).NewCleaner(inbox.CleanerConfig{}, inbox.WithTable(b.Table), inbox.WithObserver(obs))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cl.Run(ctx) }()
		require.Eventually(t, func() bool { return obs.cleaned.Load() == 50 }, 10*time.Second, 10*time.Millisecond)
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after its context was cancelled")
		}
	})

	t.Run("RaisesTheAlarmWhenAConsumerItSawCoveringTheWindowNoLongerDoes", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		b.insertAged(t, "wallet-credits", "week", "done", 10, 8*24*time.Hour, 1)
		b.insertAged(t, "wallet-credits", "day", "done", 10, 24*time.Hour, 1)
		b.insertAged(t, "new-consumer", "hour", "done", 10, time.Hour, 1)
		cl, err := inbox.OnSQL(b.db).NewCleaner(inbox.CleanerConfig{Window: 7 * 24 * time.Hour},
			inbox.WithTable(b.Table), inbox.WithLogger(b.Logs))
		require.NoError(t, err)
		ctx := context.Background()

		_, err = cl.Round(ctx)
		require.NoError(t, err)
		require.Empty(t, b.Logs.Find("rows were deleted too early"), "wallet-credits remembers 8 days, new-consumer is new")
		young := b.Logs.Find("younger than the window")
		require.Len(t, young, 1)
		require.Equal(t, "info", young[0].Level)
		require.Equal(t, "new-consumer", young[0].Fields["consumer"])

		// Someone cleans with a 2-day window, behind the Cleaner's back.
		_, err = inbox.OnSQL(b.db).Cleanup(ctx, inbox.CleanupParams{Retention: 2 * 24 * time.Hour}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		_, err = cl.Round(ctx)
		require.NoError(t, err)
		alarms := b.Logs.Find("rows were deleted too early")
		require.Len(t, alarms, 1)
		require.Equal(t, "error", alarms[0].Level)
		require.ErrorIs(t, alarms[0].Err, inbox.ErrShortMemory)
		require.Equal(t, "wallet-credits", alarms[0].Fields["consumer"])
		require.Len(t, b.Logs.Find("younger than the window"), 1, "a young consumer is noted once, not every round")
	})

	t.Run("RejectsAWindowTheRetentionDoesNotExceed", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		_, err := inbox.OnSQL(db).NewCleaner(inbox.CleanerConfig{Window: inbox.DefaultRetention})
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		_, err = inbox.OnSQL(db).NewCleaner(inbox.CleanerConfig{CleanupParams: inbox.CleanupParams{Retention: 7 * 24 * time.Hour},
			Window: 31 * 24 * time.Hour})
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
		require.ErrorContains(t, err, "would forget")
		_, err = inbox.OnSQL(db).NewCleaner(inbox.CleanerConfig{Interval: time.Millisecond})
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
}

// Remembers reads how far back each consumer remembers from the consumers table: since it was registered, or since
// the cutoff of the last cleanup when that is later. The rows themselves no longer count: a BRIN index cannot find a
// consumer's oldest row, and a consumer remembers the quiet time before its oldest row as well.
func TestRemembers_ReportsEachConsumerSinceItsRegistrationOrTheLastCleanupCutoff(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.insertAged(t, "wallet-credits", "a", "done", 5, 3*24*time.Hour, 1)
	b.insertAged(t, "payments", "b", "failed", 5, 2*time.Hour, 1)
	onlyProcessing := b.consumerAged(t, "only-processing", time.Hour)
	_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state, processed_at, locked_until)
		VALUES ($1, 'x', 'p', `+minutesAgo(time.Hour)+`, now() + interval '1 hour')`, onlyProcessing)
	require.NoError(t, err)
	ctx := context.Background()

	ms, err := inbox.OnSQL(b.db).Remembers(ctx, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Len(t, ms, 3, "every registered consumer, in order of name")
	require.Equal(t, "only-processing", ms[0].Consumer)
	require.InDelta(t, time.Hour.Seconds(), ms[0].Age.Seconds(), 60)
	require.Equal(t, "payments", ms[1].Consumer)
	require.InDelta(t, (2 * time.Hour).Seconds(), ms[1].Age.Seconds(), 60)
	require.Equal(t, "wallet-credits", ms[2].Consumer)
	require.InDelta(t, (3 * 24 * time.Hour).Seconds(), ms[2].Age.Seconds(), 60)
	require.True(t, ms[2].Covers(48*time.Hour))
	require.False(t, ms[2].Covers(7*24*time.Hour))

	// A cleanup with one day of retention cuts wallet-credits' memory to that day, and leaves the consumers that
	// are younger than the day as they were.
	res, err := inbox.OnSQL(b.db).Cleanup(ctx, inbox.CleanupParams{Retention: 24 * time.Hour}, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.EqualValues(t, 5, res.Deleted)
	ms, err = inbox.OnSQL(b.db).Remembers(ctx, inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Len(t, ms, 3)
	require.InDelta(t, time.Hour.Seconds(), ms[0].Age.Seconds(), 60)
	require.InDelta(t, (2 * time.Hour).Seconds(), ms[1].Age.Seconds(), 60)
	require.Equal(t, "wallet-credits", ms[2].Consumer)
	require.InDelta(t, (24 * time.Hour).Seconds(), ms[2].Age.Seconds(), 120, "since the cutoff of the cleanup")
	require.False(t, ms[2].Covers(48*time.Hour))

	_, err = inbox.OnSQL(b.db).Remembers(ctx, inbox.WithTable(testkit.UniqueName("inbox_test_missing")))
	require.True(t, errors.Is(err, inbox.ErrSchemaMissing))
}
