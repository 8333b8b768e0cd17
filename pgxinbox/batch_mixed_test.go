package pgxinbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/pgxinbox"
)

// Batch mode under load with every kind of handler at once, each message delivered once or twice and redelivered
// until it succeeds, as a broker would: handlers of one statement and of two, handlers that fail before their
// statement, after it, with a statement the server refuses, by a panic, and handlers that produce a message. Each
// message's effect must land exactly once: one ledger row, one credit, one inbox row; a copy returns what the
// first run produced. Members of one batch fail and succeed around one another in every order, so that every way a
// member's part is rolled back, with the members after it, is taken many times.
func TestBatch_MixedHandlersUnderLoadApplyEachMessageOnce(t *testing.T) {
	t.Parallel()
	b := newBundle(t)
	ctx := context.Background()
	ledger := b.Table + "_ledger"
	_, err := b.pool.Exec(ctx, `CREATE TABLE `+ledger+` (id text NOT NULL, account int NOT NULL)`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+ledger) })
	const accounts = 8
	_, err = b.pool.Exec(ctx, `INSERT INTO `+b.Accounts+` SELECT g, 0 FROM generate_series(2, $1::int) g`, accounts)
	require.NoError(t, err)

	ib, err := pgxinbox.New(b.pool, b.Options(inbox.WithBatch(0, inbox.MaxBatchSize), inbox.WithRejectDelay(time.Millisecond))...)
	require.NoError(t, err)
	oneStatement := `WITH l AS (INSERT INTO ` + ledger + ` VALUES ($1, $2)) UPDATE ` + b.Accounts + ` SET balance = balance + 1 WHERE id = $2`
	var attempts sync.Map // id -> *atomic.Int32
	h := ib.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		id := msg.Metadata.Get(inbox.DefaultIDMetadataKey)
		k, _ := strconv.Atoi(id[len("evt-"):])
		account := 1 + k%accounts
		n, _ := attempts.LoadOrStore(id, new(atomic.Int32))
		first := n.(*atomic.Int32).Add(1) == 1
		tx, ok := pgxinbox.TxFromContext(ctx)
		if !ok {
			return nil, errors.New("no pgx transaction in the handler's context")
		}
		kind := k % 8
		if first && kind == 2 {
			return nil, errors.New("fails before its statement")
		}
		if first && kind == 4 {
			var x int
			return nil, tx.QueryRow(ctx, `SELECT $1::int / 0`, k).Scan(&x) // division_by_zero
		}
		switch kind {
		case 1, 7: // two statements: the second after the first's answer
			var balance int64
			if err := tx.QueryRow(ctx, `SELECT balance FROM `+b.Accounts+` WHERE id = $1`, account).Scan(&balance); err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, oneStatement, id, account); err != nil {
				return nil, err
			}
		default:
			if _, err := tx.Exec(ctx, oneStatement, id, account); err != nil {
				return nil, err
			}
		}
		switch {
		case first && kind == 3:
			return nil, errors.New("fails after its statement")
		case first && kind == 6:
			panic("panics after its statement")
		case kind == 5:
			return []*message.Message{message.NewMessage("credited-"+id, []byte(id))}, nil
		}
		return nil, nil
	})

	const ids = 480
	var deliveries []string
	rng := rand.New(rand.NewPCG(1, 2))
	for k := range ids {
		id := "evt-" + strconv.Itoa(k)
		deliveries = append(deliveries, id)
		if rng.IntN(3) == 0 {
			deliveries = append(deliveries, id) // a copy, maybe running beside the first
		}
	}
	rng.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	queue := make(chan string, len(deliveries)*4)
	for _, id := range deliveries {
		queue <- id
	}
	var pending sync.WaitGroup
	pending.Add(len(deliveries))
	var mu sync.Mutex
	produced := map[string]string{} // id -> UUID of the message its first successful delivery returned
	var failures []string
	deliver := func(id string) (out []*message.Message, err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panicked: %v", r)
			}
		}()
		return h(newMsg(id))
	}
	for range 48 { // messages in flight
		go func() {
			for id := range queue {
				out, err := deliver(id)
				if err != nil {
					queue <- id // redelivered
					continue
				}
				mu.Lock()
				if k, _ := strconv.Atoi(id[len("evt-"):]); k%8 == 5 {
					if len(out) != 1 {
						failures = append(failures, fmt.Sprintf("%s returned %d messages", id, len(out)))
					} else if prev, ok := produced[id]; ok && prev != out[0].UUID {
						failures = append(failures, fmt.Sprintf("%s returned %s, then %s", id, prev, out[0].UUID))
					} else {
						produced[id] = out[0].UUID
					}
				}
				mu.Unlock()
				pending.Done()
			}
		}()
	}
	done := make(chan struct{})
	go func() { pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the deliveries did not all succeed within 2 minutes")
	}
	close(queue)
	require.Empty(t, failures)

	var rows, distinct, twice int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id),
		(SELECT count(*) FROM (SELECT id FROM `+ledger+` GROUP BY id HAVING count(*) > 1) d) FROM `+ledger).Scan(&rows, &distinct, &twice))
	require.Equal(t, ids, distinct, "every message's effect landed")
	require.Zero(t, twice, "no message's effect landed twice")
	require.Equal(t, ids, rows)
	var credited int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT sum(balance) FROM `+b.Accounts).Scan(&credited))
	require.Equal(t, ids, credited)
	require.Equal(t, ids, b.Rows(t, "wallet-credits"))
	var commits int // a batch claims its messages in one statement: their rows share xmin
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(DISTINCT xmin::text) FROM `+b.Table).Scan(&commits))
	require.Less(t, commits, ids*3/4, "messages shared batches")
	t.Logf("%d messages in %d commits", ids, commits)
}
