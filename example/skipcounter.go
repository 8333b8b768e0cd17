package main

import (
	"context"
	"sync/atomic"

	"github.com/effectively-once/watermill-inbox/observe"
)

// skipCounter counts the duplicates the inbox skipped, through its observer hook, so the example reports the
// middleware's own decisions instead of inferring them from the ledger.
type skipCounter struct {
	observe.NopObserver
	skipped atomic.Int64
}

// DuplicateSkipped counts one skipped copy.
func (s *skipCounter) DuplicateSkipped(context.Context, observe.SkipEvent) { s.skipped.Add(1) }

func (s *skipCounter) count() int64 { return s.skipped.Load() }
