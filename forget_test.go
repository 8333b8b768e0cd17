package inbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/effectively-once/watermill-inbox/internal/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestForget(t *testing.T) {
	t.Parallel()

	t.Run("ReportsAnIDThatIsNoUUIDAsNotFoundInAUUIDTable", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		table := testkit.UniqueName("inbox_test")
		t.Cleanup(func() { dropInboxTables(db, table) })
		opts := []inbox.MaintenanceOption{inbox.WithTable(table), inbox.WithIDType(inbox.IDTypeUUID)}
		require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), opts...))
		_, err := inbox.OnSQL(db).Forget(context.Background(), inbox.ForgetParams{Consumer: "wallet-credits", ID: "evt-1"}, opts...)
		require.ErrorIs(t, err, inbox.ErrNotFound)
	})

	t.Run("RejectsAnEmptyConsumerOrID", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		_, err := inbox.OnSQL(db).Forget(context.Background(), inbox.ForgetParams{ID: "evt-1"})
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})
}

// ReadStats on every driver, its counts and sizes, is in the driver suite; this reads what PostgreSQL's consumers
// table adds: a registered consumer without rows, and a consumer's age from its registration.
func TestReadStats_ListsRegisteredConsumersAndCountsExpiredLeases(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	b.insertAged(t, "wallet-credits", "a", "done", 20, 2*24*time.Hour, 1)
	b.insertAged(t, "payments", "f", "failed", 2, time.Hour, 1)
	b.insertAged(t, "payments", "r", "released", 3, time.Hour, 1)
	_, err := b.db.Exec(`INSERT INTO `+b.Table+` (consumer_id, message_id, state, attempts, processed_at, locked_until)
		VALUES ($1, 'live', 'p', 1, `+minutesAgo(0)+`, now() + interval '1 hour'),
		       ($1, 'stuck', 'p', 1, `+minutesAgo(thirtyDays)+`, now() - interval '29 days')`, b.consumerAged(t, "payments", thirtyDays))
	require.NoError(t, err)
	b.consumerAged(t, "audit", 5*time.Hour)

	st, err := inbox.OnSQL(b.db).ReadStats(context.Background(), inbox.WithTable(b.Table))
	require.NoError(t, err)
	require.Len(t, st.Consumers, 3)

	q := st.Consumers[0]
	require.Equal(t, inbox.ConsumerStats{Consumer: "audit", RemembersSince: q.RemembersSince, Age: q.Age}, q,
		"a registered consumer without rows is listed")
	require.InDelta(t, (5 * time.Hour).Seconds(), q.Age.Seconds(), 60)

	p := st.Consumers[1]
	require.Equal(t, "payments", p.Consumer)
	require.EqualValues(t, 7, p.Rows)
	require.EqualValues(t, [5]int64{0, 2, 3, 1, 1}, [5]int64{p.Done, p.Failed, p.Released, p.Processing, p.Expired})
	require.WithinDuration(t, time.Now().Add(-time.Hour), p.Oldest, 2*time.Minute, "the stuck lease is not the oldest row the cleanup may delete")
	require.InDelta(t, (30 * 24 * time.Hour).Seconds(), p.Age.Seconds(), 60, "it remembers since its first claim, as Remembers says")
	require.Equal(t, p.Age, st.Now.Sub(p.RemembersSince))

	w := st.Consumers[2]
	require.Equal(t, "wallet-credits", w.Consumer)
	require.EqualValues(t, 20, w.Rows)
	require.EqualValues(t, 20, w.Done)
	require.InDelta(t, (48 * time.Hour).Seconds(), w.Age.Seconds(), 60)

}
