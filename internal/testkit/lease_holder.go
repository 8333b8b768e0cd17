package testkit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/observe"
)

// The cases of a lease's holder: its claim by the database clock, an extension, and what the observer sees of a
// takeover on both sides.

// leaseClock is what another connection reads of a lease-mode row while its handler runs.
type leaseClock struct {
	state        string
	attempts     int64
	token        bool // the row carries a lease token
	fromBefore   bool // locked_until is at least the database clock's time before the call plus the lease
	byNow        bool // locked_until is at most the database clock's time now plus the lease
	stillBlocked bool // locked_until lies ahead of the database clock's time now
}

// readLease reads the consumer's row for id on another connection. notBefore is the database clock's time before
// the call plus lease: a claim's locked_until, by that clock, lies between it and now plus lease.
func (b *bundle) readLease(ctx context.Context, id string, notBefore time.Time, lease time.Duration) (c leaseClock, err error) {
	// The arguments in the order of their placeholders in the text, as "?" needs them.
	q := `SELECT state, coalesce(attempts, 0), lease_token IS NOT NULL,
		coalesce(locked_until >= ` + b.p(1) + `, false), coalesce(locked_until <= ` + b.d.Ago(-lease) + `, false),
		coalesce(locked_until > ` + b.d.Ago(0) + `, false)
		FROM ` + b.d.View(b.Table) + ` WHERE consumer = ` + b.p(2) + ` AND message_id = ` + b.p(3)
	err = b.inTx(ctx, func(tx driver.Tx) error {
		return tx.QueryRow(ctx, q, notBefore, consumer, id).Scan(&c.state, &c.attempts, &c.token, &c.fromBefore, &c.byNow, &c.stillBlocked)
	})
	return c, err
}

func leaseModeClaimsByTheDatabaseClockBeforeTheHandlerRuns(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	const lease = 5 * time.Second
	var notBefore time.Time
	b.queryRow(t, `SELECT `+b.d.Ago(-lease), nil, &notBefore)

	var during leaseClock
	var readErr, txErr error
	_, err := b.inbox(t, inbox.WithLease(lease)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		// Another connection sees the claim: it committed on its own, before the call out.
		during, readErr = b.readLease(msg.Context(), "evt-1", notBefore, lease)
		txErr = conn.ExecInHandler(msg.Context(), `SELECT 1`)
		require.Equal(t, 1, leaseOf(t, msg).Attempt())
		return nil, nil
	})(newMsg("evt-1"))
	require.NoError(t, err)
	require.NoError(t, readErr)
	require.Error(t, txErr, "lease mode holds no transaction open across the call")
	require.Equal(t, leaseClock{state: "processing", attempts: 1, token: true, fromBefore: true, byNow: true, stillBlocked: true}, during,
		"the claim records processing with a lease token and locked_until at its now() plus the lease, by the database clock")

	after, err := b.readLease(context.Background(), "evt-1", notBefore, lease)
	require.NoError(t, err)
	require.Equal(t, "done", after.state)
	require.False(t, after.stillBlocked, "a done row holds no lease")
}

func aHandlerCanExtendItsLease(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	extended := make(chan error, 1)
	gate, release := Gate(t)
	var calls atomic.Int64
	h := b.inbox(t, inbox.WithLease(time.Minute)).Middleware(func(msg *message.Message) ([]*message.Message, error) {
		if calls.Add(1) > 1 {
			return nil, errors.New("a second holder must not run")
		}
		err := leaseOf(t, msg).Extend(msg.Context(), time.Hour)
		extended <- err
		<-gate
		return nil, err
	})
	first := make(chan error, 1)
	go func() { _, err := h(newMsg("evt-1")); first <- err }()
	require.NoError(t, <-extended)

	// Past the lease's minute by the database clock, locked_until is the extension's.
	var beyond int64
	b.queryRow(t, `SELECT count(*) FROM `+b.d.View(b.Table)+` WHERE consumer = `+b.p(1)+` AND message_id = `+b.p(2)+
		` AND locked_until > `+b.d.Ago(-30*time.Minute), []any{consumer, "evt-1"}, &beyond)
	require.EqualValues(t, 1, beyond, "the lease runs an hour from the extension")
	_, err := h(newMsg("evt-1"))
	require.ErrorIs(t, err, inbox.ErrLeaseHeld, "the extended lease is still the first holder's")
	release()
	require.NoError(t, <-first)
	require.EqualValues(t, 1, calls.Load())
}

func theObserverSeesATakeoverBeforeTheNextClaimAndTheLostLeaseOfTheLateHolder(t *testing.T, conn Conn) {
	b := newBundle(t, conn, true)
	late, next := &EventRecorder{}, &EventRecorder{}
	holding := make(chan struct{})
	gate, release := Gate(t)
	first, extended := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := b.inbox(t, inbox.WithLease(time.Hour), inbox.WithObserver(late)).
			Middleware(func(msg *message.Message) ([]*message.Message, error) {
				close(holding)
				<-gate
				extended <- leaseOf(t, msg).Extend(msg.Context(), time.Hour)
				return nil, nil
			})(newMsg("evt-1"))
		first <- err
	}()
	<-holding
	// The hour passes for this row: the late holder's lease runs out by the database clock.
	n := b.mustExec(t, `UPDATE `+b.Table+` SET locked_until = `+b.d.Ago(time.Second)+` WHERE `+b.d.Row(b.Table), consumer, "evt-1")
	require.EqualValues(t, 1, n)

	var inHandler any
	var previous string
	_, err := b.inbox(t, inbox.WithLease(time.Hour), inbox.WithObserver(next)).
		Middleware(func(msg *message.Message) ([]*message.Message, error) {
			inHandler, previous = SpanOf(msg.Context()), leaseOf(t, msg).PreviousError()
			return nil, nil
		})(newMsg("evt-1"))
	require.NoError(t, err)
	require.Equal(t, []string{"LeaseTakenOver", "Claimed", "Committed", "Finished"}, next.Hooks())
	takeover, _ := OnlyEvent[observe.LeaseEvent](t, next, "LeaseTakenOver")
	require.Equal(t, 2, takeover.Attempt)
	require.Equal(t, observe.ModeLease, takeover.Mode)
	claim, _ := OnlyEvent[observe.ClaimEvent](t, next, "Claimed")
	require.Equal(t, 2, claim.Attempt)
	require.Equal(t, "span of evt-1", inHandler)
	require.Equal(t, "lease of attempt 1 expired", previous, "the handler can ask its provider about attempt 1")
	require.Equal(t, 1, b.Logs.Count("took over an expired lease"))
	finish, _ := OnlyEvent[observe.FinishEvent](t, next, "Finished")
	require.Equal(t, observe.OutcomeCommitted, finish.Outcome)

	release()
	require.ErrorIs(t, <-extended, inbox.ErrLeaseLost, "the late holder cannot extend a lease it lost")
	require.ErrorIs(t, <-first, inbox.ErrLeaseLost, "nor complete it over the new holder's row")
	state, attempts := b.row(t, "evt-1")
	require.Equal(t, "done", state, "the new holder's result stands")
	require.EqualValues(t, 2, attempts)
	require.Equal(t, []string{"Claimed", "LeaseLost", "Committed", "Finished"}, late.Hooks())
	lost, rec := OnlyEvent[observe.LeaseEvent](t, late, "LeaseLost")
	require.Equal(t, "evt-1", lost.EventID)
	require.Equal(t, 1, lost.Attempt)
	require.Equal(t, "span of evt-1", rec.Span)
	commit, _ := OnlyEvent[observe.CommitEvent](t, late, "Committed")
	require.ErrorIs(t, commit.Err, inbox.ErrLeaseLost)
	finish, _ = OnlyEvent[observe.FinishEvent](t, late, "Finished")
	require.Equal(t, observe.OutcomeLeaseLost, finish.Outcome)
}
