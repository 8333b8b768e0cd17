package pgxinbox_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// TestPlainBegin checks that PlainBegin switches the round-trip savings off and nothing else: the pool's TxCaps
// keep only batch members' views, its limit of connections is still read, and a message's BEGIN goes in a round
// trip of its own, where without the switch it goes in one pipeline with the claim.
func TestPlainBegin(t *testing.T) {
	t.Parallel()

	t.Run("ANilPoolStaysNil", func(t *testing.T) {
		require.Nil(t, pgxinbox.PlainBegin(nil))
		require.Nil(t, pgxinbox.PlainBegin((*pgxpool.Pool)(nil)))
		_, err := pgxinbox.New(pgxinbox.PlainBegin((*pgxpool.Pool)(nil)))
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})

	t.Run("OnlyTheViewsAreLeftAndTheLimitKept", func(t *testing.T) {
		t.Parallel()
		pool := openPool(t, testDSN())
		plain := pgxinbox.PlainBegin(pool)
		require.Equal(t, plain, pgxinbox.PlainBegin(plain), "switching it off twice is switching it off once")
		deferred := pgxinbox.Pool(pool).(driver.TxCapser).TxCaps()
		require.Equal(t, []string{"CommitWith", "DeferExec", "EndDeferred", "ExecPipelined", "RollbackToSeat", "MemberView"}, capsSet(deferred))
		off := pgxinbox.Pool(plain).(driver.TxCapser).TxCaps()
		require.Equal(t, []string{"MemberView"}, capsSet(off))
		for _, other := range []pgxinbox.Beginner{onlyBeginTx{pool}, pgxinbox.PlainBegin(onlyBeginTx{pool})} {
			require.Equal(t, []string{"MemberView"}, capsSet(pgxinbox.Pool(other).(driver.TxCapser).TxCaps()),
				"another Beginner's batch members get views too, behind PlainBegin or not")
		}
		for _, p := range []driver.Pool{pgxinbox.Pool(pool), pgxinbox.Pool(plain)} {
			require.EqualValues(t, pool.Config().MaxConns, p.(driver.PoolLimit).MaxConns())
		}
	})

	t.Run("ClaimAtCommitIsRefused", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		_, err := pgxinbox.New(pgxinbox.PlainBegin(b.pool), b.Options(inbox.WithClaimAtCommit())...)
		require.ErrorIs(t, err, inbox.ErrInvalidOption)
	})

	// A message whose handler runs one statement: deferred, BEGIN goes with the claim (3 round trips); plain,
	// BEGIN, the claim, the statement and COMMIT each take one (4). Either way the message's work commits.
	for _, c := range []struct {
		begin                    string
		trips, begins, pipelines int // per message
	}{{"deferred", 3, 0, 1}, {"plain", 4, 1, 0}} {
		t.Run("AMessage/begin="+c.begin, func(t *testing.T) {
			t.Parallel()
			const messages = 10
			var trips tripCounter
			pool := openCountingPool(t, &trips, pgx.QueryExecModeCacheStatement)
			b := newBundleOn(t, pool)
			ib, err := pgxinbox.New(beginnerFor(pool, c.begin), b.Options()...)
			require.NoError(t, err)
			var calls atomic.Int64
			h := ib.Middleware(b.Credit(1, &calls))
			_, err = h(newMsg("warm-up"))
			require.NoError(t, err)
			trips.reset()
			for i := range messages {
				_, err := h(newMsg(fmt.Sprintf("evt-%d", i)))
				require.NoError(t, err)
			}
			require.EqualValues(t, c.trips*messages, trips.trips.Load())
			require.EqualValues(t, c.begins*messages, trips.turns[turnBegin].Load(), "BEGIN on its own")
			require.EqualValues(t, c.pipelines*messages, trips.turns[turnPipeline].Load(), "pipelines")
			require.Equal(t, messages+1, b.Balance(t))
			require.Equal(t, messages+1, b.Rows(t, "wallet-credits"))
			_, err = h(newMsg("evt-0"))
			require.NoError(t, err)
			require.EqualValues(t, messages+1, calls.Load(), "a copy is skipped")
		})
	}

	// Batch mode: deferred, BEGIN and the members' first statements go in pipelines; plain, nothing does.
	for _, begin := range []string{"deferred", "plain"} {
		t.Run("ABatch/begin="+begin, func(t *testing.T) {
			t.Parallel()
			const messages = 8
			var trips tripCounter
			pool := openCountingPool(t, &trips, pgx.QueryExecModeCacheStatement)
			b := newBundleOn(t, pool)
			ib, err := pgxinbox.New(beginnerFor(pool, begin), b.Options(inbox.WithBatch(20*time.Millisecond, messages))...)
			require.NoError(t, err)
			h := ib.Middleware(b.Credit(1, nil))
			_, err = h(newMsg("warm-up"))
			require.NoError(t, err)
			trips.reset()
			var wg sync.WaitGroup
			errs := make(chan error, messages)
			for i := range messages {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := h(newMsg(fmt.Sprintf("evt-%d", i)))
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			if begin == "plain" {
				require.Zero(t, trips.turns[turnPipeline].Load(), "pipelines")
				require.NotZero(t, trips.turns[turnBegin].Load(), "BEGIN on its own")
			} else {
				require.NotZero(t, trips.turns[turnPipeline].Load(), "pipelines")
				require.Zero(t, trips.turns[turnBegin].Load(), "BEGIN on its own")
			}
			require.Equal(t, messages+1, b.Balance(t))
			require.Equal(t, messages+1, b.Rows(t, "wallet-credits"))
		})
	}
}

// beginnerFor is pool with its transactions begun as begin says: "deferred" (pgxinbox's default) or "plain"
// (pgxinbox.PlainBegin).
func beginnerFor(pool *pgxpool.Pool, begin string) pgxinbox.Beginner {
	if begin == "plain" {
		return pgxinbox.PlainBegin(pool)
	}
	return pool
}

// capsSet names the fields of caps that are set.
func capsSet(caps driver.TxCaps) []string {
	var set []string
	v := reflect.ValueOf(caps)
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			set = append(set, v.Type().Field(i).Name)
		}
	}
	return set
}

// onlyBeginTx is a Beginner that is not one of pgx's pools or connections.
type onlyBeginTx struct{ p *pgxpool.Pool }

func (b onlyBeginTx) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	return b.p.BeginTx(ctx, opts)
}
