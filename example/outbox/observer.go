package main

import (
	"context"
	"sync/atomic"

	"github.com/effectively-once/watermill-inbox/observe"
)

// skipCounter counts the duplicates an inbox skipped, as the inbox itself reports them, so the example shows the
// middleware's decisions rather than inferring them from the tables.
type skipCounter struct {
	observe.NopObserver
	skipped atomic.Int64
}

// DuplicateSkipped counts one skipped copy.
func (s *skipCounter) DuplicateSkipped(context.Context, observe.SkipEvent) { s.skipped.Add(1) }

func (s *skipCounter) count() int64 { return s.skipped.Load() }
