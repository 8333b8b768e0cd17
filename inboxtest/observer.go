package inboxtest

import (
	"context"
	"testing"

	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// EventRecorder is an observe.Observer that keeps every event the inbox reports, in order, with the name of its hook
// and the span its Claimed put into the context the hook got: a test reads which hooks ran, with what, and with
// which context.
type EventRecorder = testkit.EventRecorder

// RecordedEvent is one call of a hook.
type RecordedEvent = testkit.RecordedEvent

// SpanOf returns the span EventRecorder's Claimed put into ctx, or nil: a handler reads it to show it runs with
// the context Claimed returned.
func SpanOf(ctx context.Context) any { return testkit.SpanOf(ctx) }

// OnlyEvent returns the one event of hook that o recorded, failing t when there is not exactly one.
func OnlyEvent[E any](t testing.TB, o *EventRecorder, hook string) (E, RecordedEvent) {
	return testkit.OnlyEvent[E](t, o, hook)
}
