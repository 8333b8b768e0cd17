package main

import (
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
)

// skipCounter passes log lines on and counts the inbox's "skipped duplicate" lines, so the example reports the
// middleware's own decisions instead of inferring them from the ledger.
type skipCounter struct {
	watermill.LoggerAdapter
	skipped atomic.Int64
	parent  *skipCounter // set on loggers made by With, which count into the root
}

// Info counts the line if it announces a skipped duplicate.
func (s *skipCounter) Info(msg string, fields watermill.LogFields) {
	if msg == "skipped duplicate" {
		s.root().skipped.Add(1)
	}
	s.LoggerAdapter.Info(msg, fields)
}

// With returns a logger with extra fields that still counts into s.
func (s *skipCounter) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return &skipCounter{LoggerAdapter: s.LoggerAdapter.With(fields), parent: s.root()}
}

func (s *skipCounter) root() *skipCounter {
	if s.parent != nil {
		return s.parent
	}
	return s
}

func (s *skipCounter) count() int64 { return s.root().skipped.Load() }
