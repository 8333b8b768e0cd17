package readiness

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestGate_ChecksOnceUntilTheTableIsLostOrACheckFailed(t *testing.T) {
	var losses atomic.Uint64
	g := New[string](&losses)
	var checks atomic.Int32
	result := "ok"
	var fail error
	check := func(context.Context) (string, error) {
		checks.Add(1)
		return result, fail
	}
	ctx := context.Background()

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := g.Ready(ctx, check); v != "ok" || err != nil {
				t.Errorf("Ready = %q, %v; want ok, nil", v, err)
			}
		}()
	}
	wg.Wait()
	if n := checks.Load(); n != 1 {
		t.Fatalf("callers arriving together made %d checks; want 1", n)
	}

	losses.Add(1) // a statement found the table missing
	result, fail = "", errors.New("table missing")
	if _, err := g.Ready(ctx, check); err == nil || checks.Load() != 2 {
		t.Fatalf("after Lost: err %v, %d checks; want the failure of a second check", err, checks.Load())
	}
	if _, ok := g.Passed(); ok {
		t.Fatal("Passed reports a value after a failed check")
	}

	result, fail = "uuid", nil
	if v, err := g.Ready(ctx, check); v != "uuid" || err != nil || checks.Load() != 3 {
		t.Fatalf("after a failed check: %q, %v, %d checks; want a third check that passes", v, err, checks.Load())
	}
	if v, ok := g.Passed(); !ok || v != "uuid" {
		t.Fatalf("Passed = %q, %v; want uuid, true", v, ok)
	}
}

func TestGate_ACallerWhoseContextEndsLeavesTheNextToCheck(t *testing.T) {
	g := New[int](new(atomic.Uint64))
	ctx, cancel := context.WithCancel(context.Background())
	_, err := g.Ready(ctx, func(context.Context) (int, error) {
		cancel()
		return 0, context.Canceled
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v; want context.Canceled", err)
	}
	if _, ok := g.Passed(); ok {
		t.Fatal("a cancelled check was recorded as passed")
	}
	v, err := g.Ready(context.Background(), func(context.Context) (int, error) { return 7, nil })
	if v != 7 || err != nil {
		t.Fatalf("Ready = %d, %v; want the next caller's own check", v, err)
	}
}
