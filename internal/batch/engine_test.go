package batch

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

// These tests run the engine's logic over a fake store and a fake pool: no database, so they run under -short.
// What the engine does on a real one is proven by the inbox's batch tests and the suite (inboxtest).

// journal records, in order, what the fakes were asked to do.
type journal struct {
	mu      sync.Mutex
	entries []string
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.entries = append(j.entries, s)
}

func (j *journal) all() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.entries)
}

// fakePool begins fakeTxs named tx1, tx2… in the order they begin.
type fakePool struct {
	j     *journal
	mu    sync.Mutex
	begun []*fakeTx
}

func (p *fakePool) Begin(context.Context, driver.TxOptions) (driver.Tx, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tx := &fakeTx{j: p.j, name: "tx" + string(rune('1'+len(p.begun)))}
	p.begun = append(p.begun, tx)
	return tx, nil
}

func (p *fakePool) txs() []*fakeTx {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.begun)
}

// fakeTx journals its statements as "<tx> <query>", and its end.
type fakeTx struct {
	j    *journal
	name string
}

func (t *fakeTx) Exec(_ context.Context, query string, _ ...any) (int64, error) {
	t.j.add(t.name + " " + query)
	return 1, nil
}

func (t *fakeTx) QueryRow(context.Context, string, ...any) driver.Row { panic("not used") }

func (t *fakeTx) Query(context.Context, string, ...any) (driver.Rows, error) { panic("not used") }

func (t *fakeTx) Commit(context.Context) error   { t.j.add(t.name + " commit"); return nil }
func (t *fakeTx) Rollback(context.Context) error { t.j.add(t.name + " rollback"); return nil }
func (t *fakeTx) Native() any                    { return t }

// fakeStore claims each ID once, whatever becomes of the transaction that claimed it, and finds a claimed ID's
// row finished; it journals the claims, savepoints and unclaims.
type fakeStore struct {
	j       *journal
	mu      sync.Mutex
	claimed map[string]bool
}

func (s *fakeStore) ClaimBatch(_ context.Context, tx driver.Tx, _ string, ids []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.j.add(tx.(*fakeTx).name + " claim " + strings.Join(ids, ","))
	var owned []string
	for _, id := range ids {
		if !s.claimed[id] {
			s.claimed[id] = true
			owned = append(owned, id)
		}
	}
	return owned, nil
}

func (s *fakeStore) ReadFinished(_ context.Context, _ driver.Tx, _ string, ids []string) (map[string]dialect.StoredRow, bool, error) {
	rows := make(map[string]dialect.StoredRow, len(ids))
	for _, id := range ids {
		rows[id] = dialect.StoredRow{State: "done"}
	}
	return rows, true, nil
}

func (s *fakeStore) Holds(context.Context, driver.Tx, string, string) (bool, error) { return true, nil }

func (s *fakeStore) Unclaim(_ context.Context, tx driver.Tx, _, id string) error {
	s.j.add(tx.(*fakeTx).name + " unclaim " + id)
	return nil
}

func (s *fakeStore) Savepoint(ctx context.Context, tx driver.Tx, step dialect.SavepointStep) error {
	_, err := tx.Exec(ctx, map[dialect.SavepointStep]string{dialect.SetSavepoint: "savepoint", dialect.RollbackSavepoint: "rollback to savepoint"}[step])
	return err
}

func (s *fakeStore) SaveProduced(context.Context, driver.Tx, string, string, []byte) error {
	return nil
}

func (s *fakeStore) Explain(err error) error { return err }

// fakeMessage runs handle as its handler, and journals how it ended: "<id> alone", "<id> skipped",
// "<id> failed", "<id> committed".
type fakeMessage struct {
	j      *journal
	id     string
	handle func(tx driver.Tx) error
}

func (m *fakeMessage) Claiming() {}

func (m *fakeMessage) Run(tx driver.Tx) ([]*message.Message, error) { return nil, m.handle(tx) }

func (m *fakeMessage) Encode([]*message.Message) ([]byte, error) { return nil, nil }

func (m *fakeMessage) Failed(err error) error { m.j.add(m.id + " failed"); return err }

func (m *fakeMessage) CommitEnded(_ time.Time, err error, produced []*message.Message) ([]*message.Message, error) {
	m.j.add(m.id + " committed")
	return produced, err
}

func (m *fakeMessage) Alone() ([]*message.Message, error) { m.j.add(m.id + " alone"); return nil, nil }

func (m *fakeMessage) Skip(dialect.StoredRow) ([]*message.Message, error) {
	m.j.add(m.id + " skipped")
	return nil, nil
}

func (m *fakeMessage) LogFields() watermill.LogFields { return watermill.LogFields{"event_id": m.id} }

// bundle is an engine over the fakes.
type bundle struct {
	e    *Engine
	j    *journal
	pool *fakePool
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs map[string]error
}

func setup(t *testing.T, size, concurrency int) *bundle {
	t.Helper()
	j := &journal{}
	pool := &fakePool{j: j}
	e := New(Config{Size: size, Wait: 0, Concurrency: concurrency, Pool: pool,
		Begin: func(ctx context.Context) (driver.Tx, error) { return pool.Begin(ctx, driver.TxOptions{}) },
		Store: &fakeStore{j: j, claimed: map[string]bool{}}})
	return &bundle{e: e, j: j, pool: pool, errs: map[string]error{}}
}

// apply applies a message of ID id from a goroutine of its own; wait waits for every one applied so.
func (b *bundle) apply(id string, handle func(tx driver.Tx) error) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		_, err := b.e.Apply(context.Background(), "c", id, &fakeMessage{j: b.j, id: id, handle: handle})
		b.mu.Lock()
		defer b.mu.Unlock()
		b.errs[id] = err
	}()
}

// pending waits until n messages wait for a batch.
func (b *bundle) pending(t *testing.T, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return b.e.Pending("c") == n }, 10*time.Second, time.Millisecond)
}

func exec(query string) func(tx driver.Tx) error {
	return func(tx driver.Tx) error {
		_, err := tx.Exec(context.Background(), query)
		return err
	}
}

func TestEngine_AMessageThatFindsNothingRunningGoesAloneWithoutABatch(t *testing.T) {
	b := setup(t, 16, 1)
	_, err := b.e.Apply(context.Background(), "c", "a", &fakeMessage{j: b.j, id: "a"})
	require.NoError(t, err)
	require.Equal(t, []string{"a alone"}, b.j.all())
	require.Empty(t, b.pool.txs(), "a lone message begins no batch")
}

func TestEngine_MessagesThatWaitTogetherShareOneClaimAndOneCommit(t *testing.T) {
	b := setup(t, 16, 1)
	release := b.e.Hold("c")
	for _, id := range []string{"c", "a", "b"} {
		b.apply(id, exec("work "+id))
	}
	b.pending(t, 3)
	release()
	b.wg.Wait()

	entries := b.j.all()
	require.Equal(t, "tx1 claim a,b,c", entries[0], "one claim, of the IDs sorted")
	require.Equal(t, "tx1 commit", entries[len(entries)-1-3], "one commit, before any member returns")
	require.ElementsMatch(t, []string{"a committed", "b committed", "c committed"}, entries[len(entries)-3:])
	require.Len(t, b.pool.txs(), 1)
	for _, id := range []string{"a", "b", "c"} {
		require.Contains(t, entries, "tx1 work "+id)
	}
}

func TestEngine_ASecondCopyOfAnIDGoesInALaterBatchAndEndsAsACopy(t *testing.T) {
	b := setup(t, 16, 1)
	release := b.e.Hold("c")
	var mu sync.Mutex
	runs := 0
	count := func(driver.Tx) error { mu.Lock(); defer mu.Unlock(); runs++; return nil }
	b.apply("x", count)
	b.pending(t, 1)
	b.apply("x", count)
	b.apply("y", count)
	b.pending(t, 3)
	release()
	b.wg.Wait()

	entries := b.j.all()
	require.Equal(t, "tx1 claim x,y", entries[0], "a batch holds one copy of an ID")
	require.Contains(t, entries, "tx2 claim x")
	require.Contains(t, entries, "tx2 rollback", "a batch that claimed nothing commits nothing")
	require.Contains(t, entries, "x skipped", "the copy ends as a copy, with the row its batch read")
	require.Equal(t, 2, runs, "x's handler ran once, y's once")
}

func TestEngine_AFailingMemberGivesBackItsClaimAndTheOthersCommit(t *testing.T) {
	b := setup(t, 16, 1)
	release := b.e.Hold("c")
	refused := errors.New("refused")
	b.apply("a", func(tx driver.Tx) error {
		if _, err := tx.Exec(context.Background(), "work a"); err != nil {
			return err
		}
		return refused
	})
	b.apply("b", exec("work b"))
	b.pending(t, 2)
	release()
	b.wg.Wait()

	require.ErrorIs(t, b.errs["a"], refused)
	require.NoError(t, b.errs["b"])
	entries := b.j.all()
	a := slices.Index(entries, "tx1 work a")
	require.Equal(t, "tx1 savepoint", entries[a-1], "a member's first statement follows its savepoint")
	require.Equal(t, []string{"tx1 rollback to savepoint", "tx1 unclaim a"}, entries[a+1:a+3],
		"its part is rolled back before another member takes the connection")
	require.Contains(t, entries, "a failed")
	require.Contains(t, entries, "tx1 commit")
	require.Contains(t, entries, "b committed")
	require.NotContains(t, entries, "a committed")
}

func TestEngine_ABatchWaitsForTheTurnOfTheBatchBeforeIt(t *testing.T) {
	b := setup(t, 1, 1) // batches of one message, one batch at a time on the database
	release := b.e.Hold("c")
	working, done := make(chan struct{}), make(chan struct{})
	b.apply("1", func(tx driver.Tx) error {
		if _, err := tx.Exec(context.Background(), "1a"); err != nil {
			return err
		}
		close(working)
		<-done // holds the connection, and so the turn, however long it takes
		_, err := tx.Exec(context.Background(), "1b")
		return err
	})
	b.pending(t, 1)
	b.apply("2", exec("2"))
	b.pending(t, 2)
	release()
	<-working

	q := b.e.queueOf("c")
	var second *batch
	require.Eventually(t, func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		if len(q.gated) == 1 && q.gated[0].atTurn.Load() == 1 {
			second = q.gated[0]
		}
		return second != nil
	}, 10*time.Second, time.Millisecond, "the second batch forms, and its member asks for the connection")
	q.mu.Lock()
	admitted := second.admitted
	q.mu.Unlock()
	require.False(t, admitted, "the second batch waits for the turn the first holds")
	require.NotContains(t, b.j.all(), "tx2 2")

	close(done)
	b.wg.Wait()
	entries := b.j.all()
	require.Less(t, slices.Index(entries, "tx1 1b"), slices.Index(entries, "tx2 2"))
	require.NoError(t, b.errs["1"])
	require.NoError(t, b.errs["2"])
}
