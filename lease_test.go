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

// Lease mode on every driver is in the driver suite (inboxtest's LeaseMode... cases); these read or write the
// PostgreSQL table itself: the database clock of a claim, a dead holder's row, a lease that outlives its length.

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
		require.Len(t, b.logs.Find("took over an expired lease"), 1)
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
