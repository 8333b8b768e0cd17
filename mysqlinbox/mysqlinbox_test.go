package mysqlinbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/mysqlinbox"
)

// The transaction mode's behaviour on every driver is in the driver suite (suite_test.go); these are this
// module's own.
func TestTransactionMode(t *testing.T) {
	t.Parallel()

	t.Run("RacingCopiesOfEachEventApplyItOnce", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := mysqlinbox.New(b.db, b.Options()...)
		require.NoError(t, err)
		var calls, committed atomic.Int64
		h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
			produced, err := b.Credit(100, &calls)(msg)
			if err == nil {
				committed.Add(1) // counted before the commit; the balance proves which commits landed
			}
			return produced, err
		})

		const events, copies = 20, 3
		var wg sync.WaitGroup
		errs := make(chan error, events*copies)
		for e := range events {
			for range copies {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// A nacked copy comes back, as a broker would redeliver it; a deadlock among waiting
					// inserts is such a nack.
					for try := 0; ; try++ {
						_, err := h(newMsg(fmt.Sprintf("evt-%d", e)))
						if err == nil {
							return
						}
						if try == 5 {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.Equal(t, events*100, b.Balance(t), "each event credited once")
		require.Equal(t, events, b.Rows(t, "wallet-credits"))
	})

	t.Run("IDsCompareByteForByte", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ib, err := mysqlinbox.New(b.db, b.Options()...)
		require.NoError(t, err)
		h := ib.Middleware(b.Credit(1, nil))
		for _, id := range []string{"evt-a", "evt-A", "evt-a ", "évt-a", "evt-á"} {
			_, err := h(newMsg(id))
			require.NoError(t, err, id)
		}
		_, err = h(newMsg("evt-a"))
		require.NoError(t, err)
		require.Equal(t, 5, b.Balance(t), "IDs differing in case, a trailing space or an accent are different IDs")
		require.Equal(t, 5, b.Rows(t, "wallet-credits"))
	})

	t.Run("TheLongestIDAndConsumerNameFitTheKey", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		consumer := string(make([]byte, 0)) + fmt.Sprintf("%0512d", 7)
		ib, err := mysqlinbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer(consumer), inbox.WithMaxIDLength(2000))
		require.NoError(t, err)
		id := fmt.Sprintf("%02000d", 9)
		_, err = ib.Middleware(b.Credit(1, nil))(newMsg(id))
		require.NoError(t, err)
		require.Equal(t, 1, b.Rows(t, consumer))
	})
}

func TestOperations(t *testing.T) {
	t.Parallel()

	t.Run("CleanupDeletesExpiredRowsInBatchesAndReportsAbandonedLeases", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ctx := context.Background()
		ib, err := mysqlinbox.New(b.db, b.Options()...)
		require.NoError(t, err)
		h := ib.Middleware(func(*message.Message) ([]*message.Message, error) {
			return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("x"))}, nil
		})
		for n := range 5 {
			_, err := h(newMsg(fmt.Sprintf("evt-%d", n)))
			require.NoError(t, err)
		}
		_, err = b.db.Exec(`UPDATE ` + b.Table + ` SET processed_at = processed_at - INTERVAL 30 DAY WHERE message_id IN ('evt-0', 'evt-1', 'evt-2')`)
		require.NoError(t, err)
		_, err = b.db.Exec(`INSERT INTO `+b.Table+` (consumer, message_id, state, attempts, lease_token, locked_until, processed_at)
			VALUES ('wallet-credits', 'stuck', 'processing', 1, ?, UTC_TIMESTAMP(6) - INTERVAL 20 DAY, UTC_TIMESTAMP(6) - INTERVAL 20 DAY)`,
			watermill.NewUUID())
		require.NoError(t, err)

		res, err := mysqlinbox.Database(b.db).Cleanup(ctx, inbox.CleanupParams{Retention: 14 * 24 * time.Hour, BatchSize: 2}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.False(t, res.Skipped)
		require.EqualValues(t, 3, res.Deleted)
		require.EqualValues(t, 1, res.Abandoned)
		require.GreaterOrEqual(t, res.Batches, 3, "two rows a batch, then an empty one")
		require.Equal(t, 3, b.Rows(t, "wallet-credits"), "evt-3, evt-4 and the abandoned lease are kept")
		var produced int
		require.NoError(t, b.db.QueryRow(`SELECT COUNT(*) FROM `+b.Table+`_produced`).Scan(&produced))
		require.Equal(t, 2, produced, "the produced messages went with their rows")
	})

	t.Run("CleanupSkipsTheRoundWhileAnotherHoldsTheLockAndTakesAnExpiredOne", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ctx := context.Background()
		_, err := b.db.Exec(`INSERT INTO `+b.Table+`_locks (name, holder, held_until) VALUES ('cleanup', ?, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE)`, watermill.NewUUID())
		require.NoError(t, err)
		db := mysqlinbox.Database(b.db)
		res, err := db.Cleanup(ctx, inbox.CleanupParams{}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.True(t, res.Skipped)

		_, err = b.db.Exec(`UPDATE ` + b.Table + `_locks SET held_until = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND`)
		require.NoError(t, err)
		res, err = db.Cleanup(ctx, inbox.CleanupParams{}, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.False(t, res.Skipped, "a holder whose time ran out loses the lock")
		var locks int
		require.NoError(t, b.db.QueryRow(`SELECT COUNT(*) FROM `+b.Table+`_locks`).Scan(&locks))
		require.Zero(t, locks, "the round frees the lock it took")
	})

	t.Run("RemembersAndReadStatsCountEachConsumersRows", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		ctx := context.Background()
		for _, consumer := range []string{"billing", "wallet-credits"} {
			ib, err := mysqlinbox.New(b.db, inbox.WithTable(b.Table), inbox.WithConsumer(consumer))
			require.NoError(t, err)
			_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(newMsg("evt-1"))
			require.NoError(t, err)
		}
		_, err := b.db.Exec(`UPDATE ` + b.Table + ` SET processed_at = processed_at - INTERVAL 3 DAY WHERE consumer = 'billing'`)
		require.NoError(t, err)
		_, err = b.db.Exec(`INSERT INTO `+b.Table+` (consumer, message_id, state, attempts, lease_token, locked_until, processed_at)
			VALUES ('billing', 'held', 'processing', 1, ?, UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE, UTC_TIMESTAMP(6) - INTERVAL 9 DAY)`, watermill.NewUUID())
		require.NoError(t, err)
		db := mysqlinbox.Database(b.db)

		ms, err := db.Remembers(ctx, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.Len(t, ms, 2)
		require.Equal(t, "billing", ms[0].Consumer)
		require.True(t, ms[0].Covers(72*time.Hour-time.Minute), "billing remembers three days: %s", ms[0].Age)
		require.False(t, ms[0].Covers(4*24*time.Hour), "a 'processing' row does not count: %s", ms[0].Age)
		require.False(t, ms[1].Covers(time.Hour))

		st, err := db.ReadStats(ctx, inbox.WithTable(b.Table))
		require.NoError(t, err)
		require.Len(t, st.Consumers, 2)
		require.Equal(t, inbox.ConsumerStats{Consumer: "billing", Rows: 2, Done: 1, Processing: 1,
			Oldest: st.Consumers[0].Oldest, RemembersSince: ms[0].Oldest, Age: st.Consumers[0].Age}, st.Consumers[0],
			"on MySQL a consumer remembers since its oldest row")
		require.Equal(t, st.Consumers[0].Oldest, st.Consumers[0].RemembersSince)
		require.InDelta(t, ms[0].Age.Seconds(), st.Consumers[0].Age.Seconds(), 5, "read a moment later")
		require.Greater(t, st.Consumers[0].Age, 71*time.Hour)
		require.EqualValues(t, 1, st.Consumers[1].Done)
		require.Positive(t, st.TotalBytes)

		_, err = db.ReadStats(ctx, inbox.WithTable(b.Table+"_nope"))
		require.ErrorIs(t, err, inbox.ErrSchemaMissing)
	})

}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("ATableChangedByHandIsReportedAsDrift", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		_, err := b.db.Exec(`ALTER TABLE ` + b.Table + ` DROP INDEX ` + b.Table + `_processing, MODIFY attempts BIGINT`)
		require.NoError(t, err)
		err = mysqlinbox.Database(b.db).Migrate(context.Background(), inbox.WithTable(b.Table))
		require.ErrorIs(t, err, inbox.ErrSchemaDrift)
		require.ErrorContains(t, err, "index "+b.Table+"_processing does not exist")
		require.ErrorContains(t, err, "column attempts is bigint, want int")
	})

	t.Run("UUIDColumnsAreRefused", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		err := mysqlinbox.Database(db).Migrate(context.Background(), inbox.WithTable(inboxtest.UniqueName("inbox_my")), inbox.WithIDType(inbox.IDTypeUUID))
		require.ErrorContains(t, err, "VARBINARY")
	})
}

// joinAlways joins a transaction it begins itself, standing in for a subscriber that carries one.
type joinAlways struct{ tx driver.Tx }

func (j joinAlways) Joined(context.Context) (driver.Tx, bool) { return j.tx, true }

func TestJoiningASubscribersTransactionIsRefused(t *testing.T) {
	t.Parallel()
	db := openDB(t)

	_, err := mysqlinbox.New(db, inbox.WithSubscriberTx(true))
	require.ErrorIs(t, err, inbox.ErrInvalidOption)
	require.ErrorContains(t, err, "cannot join a subscriber's transaction")

	_, err = inbox.OnDialect(mysqlinbox.Dialect(), driver.StdSQL(db), joinAlways{}).New()
	require.ErrorIs(t, err, inbox.ErrInvalidOption)

	_, err = mysqlinbox.New(db)
	require.NoError(t, err, "by default the inbox begins its own transaction")
	_, err = mysqlinbox.New(db, inbox.WithSubscriberTx(false))
	require.NoError(t, err)
}

func TestClassifyNamesTheErrorsTheInboxBranchesOn(t *testing.T) {
	t.Parallel()
	for number, want := range map[uint16]dialect.ErrorKind{
		1146: dialect.NoTable,
		1366: dialect.IDRefused, 1406: dialect.IDRefused, 1292: dialect.IDRefused,
		4025: dialect.ValueRefused, 1153: dialect.ValueRefused,
		1213: dialect.LockConflict, 1205: dialect.LockConflict,
		1243: dialect.StatementMissing,
		1062: dialect.Other, 1064: dialect.Other,
	} {
		err := fmt.Errorf("wrapped: %w", &mysql.MySQLError{Number: number, Message: "x"})
		require.Equal(t, want, mysqlinbox.Dialect().Classify(err), "error %d", number)
	}
	require.Equal(t, dialect.ValueRefused, mysqlinbox.Dialect().Classify(mysql.ErrPktTooLarge))
	require.True(t, mysqlinbox.Dialect().Classify(&mysql.MySQLError{Number: 1213}).Retryable())
}
