package testkit

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
	"github.com/effectively-once/watermill-inbox/driver"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

func DeliverCopies(t testing.TB, h message.HandlerFunc, ids []string, copies int) []error {
	t.Helper()
	var mu sync.Mutex
	var unexpected []error
	deadline := time.Now().Add(90 * time.Second)
	var wg sync.WaitGroup
	for _, id := range ids {
		for range copies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					_, err := h(NewMessage(id))
					if err == nil {
						return
					}
					if !errors.Is(err, inbox.ErrLeaseHeld) {
						mu.Lock()
						unexpected = append(unexpected, fmt.Errorf("%s: %w", id, err))
						mu.Unlock()
					}
				}
				mu.Lock()
				unexpected = append(unexpected, fmt.Errorf("%s: still not accepted after 90s", id))
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	return unexpected
}

func DeliverTogether(h message.HandlerFunc, ids []string) (map[string][]*message.Message, map[string]error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	outs, errs := map[string][]*message.Message{}, map[string]error{}
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := h(NewMessage(id))
			mu.Lock()
			defer mu.Unlock()
			outs[id], errs[id] = out, err
		}()
	}
	wg.Wait()
	return outs, errs
}

func EventIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return ids
}

type CallCounter struct {
	mu    sync.Mutex
	calls map[string]int
}

// Call counts a call for id.
func (c *CallCounter) Call(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[id]++
}

// RequireOnceEach fails unless every one of ids was called exactly once.
func (c *CallCounter) RequireOnceEach(t testing.TB, ids []string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var wrong []string
	for _, id := range ids {
		if c.calls[id] != 1 {
			wrong = append(wrong, fmt.Sprintf("%s called %d times", id, c.calls[id]))
		}
	}
	require.Empty(t, wrong, "every event's external call happens exactly once")
}

type BeginCounter struct {
	driver.Pool
	Begun atomic.Int64
}

// Begin counts a transaction, then begins it on the pool.
func (c *BeginCounter) Begin(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.Begun.Add(1)
	return c.Pool.Begin(ctx, opts)
}

func Gate(t testing.TB) (gate <-chan struct{}, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}

func RedeliverWhile(h message.HandlerFunc, id string, n int) (stop func() (accepted int64, lastErr error)) {
	done := make(chan struct{})
	var accepted atomic.Int64
	var last atomic.Value
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := h(NewMessage(id)); err != nil {
					last.Store(err)
				} else {
					accepted.Add(1)
				}
			}
		}()
	}
	return func() (int64, error) {
		close(done)
		wg.Wait()
		err, _ := last.Load().(error)
		return accepted.Load(), err
	}
}
