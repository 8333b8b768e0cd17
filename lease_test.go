package inbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
)

// leaseRow is an inbox row as lease mode leaves it.
type leaseRow struct {
	state, token, lastError string
	attempts                int
	live                    bool
}

func (b *testBundle) leaseRow(t testing.TB, id string) leaseRow {
	t.Helper()
	var r leaseRow
	require.NoError(t, b.db.QueryRow(`SELECT state, coalesce(lease_token::text, ''), coalesce(last_error, ''),
		coalesce(attempts, 0), coalesce(locked_until > now(), false)
		FROM `+b.table+`_view WHERE consumer = 'wallet-credits' AND message_id = $1`, id).
		Scan(&r.state, &r.token, &r.lastError, &r.attempts, &r.live))
	return r
}

// consumerID registers consumer in the inbox's consumers table, as an Inbox does at its first claim, and returns
// the id its rows carry: for rows a test writes as another process would have left them.
func (b *testBundle) consumerID(t testing.TB, consumer string) int {
	t.Helper()
	_, err := b.db.Exec(`INSERT INTO `+b.table+`_consumers (name) VALUES ($1) ON CONFLICT (name) DO NOTHING`, consumer)
	require.NoError(t, err)
	var id int
	require.NoError(t, b.db.QueryRow(`SELECT id FROM `+b.table+`_consumers WHERE name = $1`, consumer).Scan(&id))
	return id
}

// countingObserver counts what the inbox reports.
type countingObserver struct {
	inbox.NopObserver
	claims, duplicates, takeovers atomic.Int64
	deadLetters                   sync.Map // reason -> *atomic.Int64
}

func (o *countingObserver) Claimed(ctx context.Context, _ inbox.ClaimEvent) context.Context {
	o.claims.Add(1)
	return ctx
}
func (o *countingObserver) DuplicateSkipped(context.Context, inbox.SkipEvent) { o.duplicates.Add(1) }
func (o *countingObserver) LeaseTakenOver(context.Context, inbox.LeaseEvent)  { o.takeovers.Add(1) }
func (o *countingObserver) DeadLettered(_ context.Context, e inbox.DeadLetterEvent) {
	n, _ := o.deadLetters.LoadOrStore(e.Reason, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

func leaseOf(t testing.TB, msg *message.Message) *inbox.Lease {
	t.Helper()
	l, ok := inbox.LeaseFromContext(msg.Context())
	require.True(t, ok, "a lease-mode handler has a lease in its context")
	return l
}

func TestLease_Claim(t *testing.T) {
	t.Parallel()

	t.Run("RecordsProcessingWithALeaseByTheDatabaseClockBeforeTheHandlerRuns", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithLease(5*time.Second))
		// The claim's now() lies between the database's now() before the call and its now() in the handler, so
		// locked_until lies between those plus the lease. (processed_at is in whole minutes: it cannot tell.)
		var before time.Time
		require.NoError(t, b.db.QueryRow(`SELECT now()`).Scan(&before))
		var during leaseRow
		var sinceBefore, fromNow time.Duration
		_, err := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			// Another connection sees the claim: it committed on its own, before the call out.
			during = b.leaseRow(t, "evt-1")
			var beforeMicros, nowMicros int64
			require.NoError(t, b.db.QueryRow(`SELECT (extract(epoch FROM locked_until - $1::timestamptz) * 1e6)::bigint,
				(extract(epoch FROM locked_until - now()) * 1e6)::bigint FROM `+b.table, before).Scan(&beforeMicros, &nowMicros))
			sinceBefore, fromNow = time.Duration(beforeMicros)*time.Microsecond, time.Duration(nowMicros)*time.Microsecond
			require.Equal(t, 1, leaseOf(t, msg).Attempt())
			_, inTx := inbox.TxFromContext(msg.Context())
			require.False(t, inTx, "lease mode holds no transaction open across the call")
			return nil, nil
		})(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, "processing", during.state)
		require.Equal(t, 1, during.attempts)
		require.True(t, during.live)
		require.NotEmpty(t, during.token)
		require.GreaterOrEqual(t, sinceBefore, 5*time.Second, "locked_until is the claim's now() + lease, by the database clock")
		require.LessOrEqual(t, fromNow, 5*time.Second, "locked_until is the claim's now() + lease, by the database clock")

		after := b.leaseRow(t, "evt-1")
		require.Equal(t, "done", after.state)
		require.False(t, after.live)
	})
}

func TestLease_Takeover(t *testing.T) {
	t.Parallel()

	t.Run("AnExpiredLeaseIsTakenOverWithTheNextAttemptAndANewToken", func(t *testing.T) {
		t.Parallel()
		obs := &countingObserver{}
		ib, b := setup(t, inbox.WithLease(time.Minute), inbox.WithObserver(obs))
		// A holder that died: its lease ran out a second ago.
		const deadToken = "00000000-0000-4000-8000-000000000001"
		_, err := b.db.Exec(`INSERT INTO `+b.table+` (consumer_id, message_id, state, attempts, lease_token, locked_until)
			VALUES ($1, 'evt-1', 'p', 1, $2, now() - interval '1 second')`, b.consumerID(t, "wallet-credits"), deadToken)
		require.NoError(t, err)

		var attempt int
		var previous string
		_, err = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			attempt, previous = leaseOf(t, msg).Attempt(), leaseOf(t, msg).PreviousError()
			require.NotEqual(t, deadToken, b.leaseRow(t, "evt-1").token)
			return nil, nil
		})(newMsg("evt-1"))
		require.NoError(t, err)
		require.Equal(t, 2, attempt, "the handler sees attempt 2, so it can ask the provider about attempt 1")
		require.Equal(t, "lease of attempt 1 expired", previous)
		require.EqualValues(t, 1, obs.takeovers.Load())
		require.Len(t, b.logs.find("took over an expired lease"), 1)
		require.Equal(t, "done", b.leaseRow(t, "evt-1").state)
	})

	t.Run("CompletionIsFencedSoALateHolderCannotOverwriteTheNewOne", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithLease(200*time.Millisecond))
		aStarted, bHolding, bFinish := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var aLease *inbox.Lease
		var calls atomic.Int64
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			switch calls.Add(1) {
			case 1: // A: a slow call that outlives its lease
				aLease = leaseOf(t, msg)
				close(aStarted)
				<-bHolding
				return nil, nil
			default: // B: took over, still calling when A returns
				close(bHolding)
				<-bFinish
				return nil, nil
			}
		})
		aDone := make(chan error, 1)
		go func() { _, err := h(newMsg("evt-1")); aDone <- err }()
		<-aStarted
		time.Sleep(300 * time.Millisecond) // A's lease runs out
		bDone := make(chan error, 1)
		go func() { _, err := h(newMsg("evt-1")); bDone <- err }()

		errA := <-aDone
		require.ErrorIs(t, errA, inbox.ErrLeaseLost, "A learns it lost the lease")
		require.Len(t, b.logs.find("lease write failed"), 1, "and says so in the log")
		row := b.leaseRow(t, "evt-1")
		require.Equal(t, "processing", row.state, "A's 'done' did not overwrite B's hold")
		require.Equal(t, 2, row.attempts)
		require.ErrorIs(t, aLease.Extend(context.Background(), time.Minute), inbox.ErrLeaseLost)

		close(bFinish)
		require.NoError(t, <-bDone)
		require.Equal(t, "done", b.leaseRow(t, "evt-1").state)
	})
}

func TestLease_AHandlerCanExtendItsLease(t *testing.T) {
	t.Parallel()
	ib, b := setup(t, inbox.WithLease(300*time.Millisecond))
	extended := make(chan struct{})
	gate, release := inboxtest.Gate(t)
	var calls atomic.Int64
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if calls.Add(1) > 1 {
			return nil, errors.New("a second holder must not run")
		}
		if err := leaseOf(t, msg).Extend(msg.Context(), time.Minute); err != nil {
			return nil, err
		}
		close(extended)
		<-gate
		return nil, nil
	})
	first := make(chan error, 1)
	go func() { _, err := h(newMsg("evt-1")); first <- err }()
	<-extended
	time.Sleep(400 * time.Millisecond) // past the original lease
	require.True(t, b.leaseRow(t, "evt-1").live)
	_, err := h(newMsg("evt-1"))
	require.ErrorIs(t, err, inbox.ErrLeaseHeld, "the extended lease is still the first holder's")
	release()
	require.NoError(t, <-first)
	require.EqualValues(t, 1, calls.Load())
}

func TestLease_TwoConsumersRacingForOneIDNeverHoldItTogether(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	var holders, maxHolders, calls atomic.Int64
	handler := func(*message.Message) ([]*message.Message, error) {
		calls.Add(1)
		n := holders.Add(1)
		for {
			m := maxHolders.Load()
			if n <= m || maxHolders.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		holders.Add(-1)
		return nil, nil
	}
	var wg sync.WaitGroup
	for c := range 2 { // two consumer processes, each with its own Inbox and connections
		ib, err := inbox.New(openDB(t), inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"), inbox.WithLease(time.Minute))
		require.NoError(t, err)
		h := ib.Middleware(handler)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := h(newMsg("evt-1"))
					if err == nil {
						return
					}
					if !errors.Is(err, inbox.ErrLeaseHeld) {
						t.Errorf("consumer %d: %v", c, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	require.EqualValues(t, 1, maxHolders.Load(), "at no moment did two consumers hold the lease")
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, "done", b.leaseRow(t, "evt-1").state)
}

func TestNew_LeaseOptionsAreCheckedTogether(t *testing.T) {
	t.Parallel()
	db := openDB(t)
	for name, opts := range map[string][]inbox.Option{
		"MaxAttemptsWithoutLease": {inbox.WithMaxAttempts(3)},
		"LeaseTooShort":           {inbox.WithLease(time.Millisecond)},
		"LeaseTooLong":            {inbox.WithLease(48 * time.Hour)},
		"NegativeMaxAttempts":     {inbox.WithLease(time.Second), inbox.WithMaxAttempts(-1)},
	} {
		_, err := inbox.New(db, opts...)
		require.ErrorIs(t, err, inbox.ErrInvalidOption, name)
	}
}

func TestLease_ATransactionModeCopyWaitsForALeaseModeHolderOfTheSameTable(t *testing.T) {
	t.Parallel()
	leased, b := setup(t, inbox.WithLease(time.Minute))
	transactional, err := inbox.New(b.db, b.opts[:3]...) // the same table and consumer, without WithLease
	require.NoError(t, err)
	holding := make(chan struct{})
	gate, release := inboxtest.Gate(t)
	first := make(chan error, 1)
	go func() {
		_, err := leased.Middleware(func(*message.Message) ([]*message.Message, error) {
			close(holding)
			<-gate
			return nil, nil
		})(newMsg("evt-1"))
		first <- err
	}()
	<-holding

	var calls atomic.Int64
	h := transactional.Middleware(b.credit(100, &calls))
	_, err = h(newMsg("evt-1"))
	require.ErrorIs(t, err, inbox.ErrLeaseHeld, "an unfinished lease-mode row is not a duplicate")
	release()
	require.NoError(t, <-first)
	_, err = h(newMsg("evt-1"))
	require.NoError(t, err)
	require.Zero(t, calls.Load(), "once done, it is")
}

func TestLease_KeysOfDifferentMessagesNeverCollide(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	keyOf := func(consumer, id, step string) string {
		ib, err := inbox.New(b.db, inbox.WithTable(b.table), inbox.WithConsumer(consumer), inbox.WithLease(time.Minute))
		require.NoError(t, err)
		var key string
		_, err = ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			if key = leaseOf(t, msg).IdempotencyKey(); step != "" {
				key = leaseOf(t, msg).StepKey(step)
			}
			return nil, nil
		})(newMsg(id))
		require.NoError(t, err)
		return key
	}
	require.NotEqual(t, keyOf("payments", "eu:42", ""), keyOf("payments:eu", "42", ""),
		"a separator inside a consumer name or an event ID cannot make two messages share a key")
	require.NotEqual(t, keyOf("payments", "eu:43:charge", ""), keyOf("payments", "eu:43", "charge"),
		"nor one event's step key equal another event's key")
}
