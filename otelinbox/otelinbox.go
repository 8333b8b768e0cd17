// Package otelinbox reports what the inbox does to OpenTelemetry: metrics for every event of observe.Observer, and a
// span per message the inbox claims or skips. It is a module of its own, so that the inbox's users who do not use
// OpenTelemetry do not get its dependencies.
//
// The span of a claimed message starts when its claim began and ends when the inbox is done with it: committed,
// failed or dead-lettered. The handler runs with the span in its message's context, so the spans the handler starts
// are its children. The span is a child of the span the message's context already carries, when a middleware
// before the inbox started one; otherwise of the trace context the message carries in its metadata (the W3C
// traceparent, as Watermill's OpenTelemetry publishers write it), which is then also the span's link when it is not
// its parent. A copy of an applied message, skipped, gets a span of its own from its claim to the skip.
//
// Span attributes: inbox.consumer, inbox.event_id, inbox.mode, inbox.outcome (committed, failed, dead_lettered,
// lease_lost, duplicate), inbox.attempt and messaging.message.id (the Watermill message UUID). The metrics, whose
// durations are in seconds:
//
//	watermill.inbox.claims                 counter    {inbox.consumer, inbox.mode}
//	watermill.inbox.claim.duration         histogram  {inbox.consumer, inbox.mode}  claims and duplicates alike
//	watermill.inbox.duplicates_skipped     counter    {inbox.consumer, inbox.mode}
//	watermill.inbox.commit.duration        histogram  {inbox.consumer, inbox.mode}  failed commits included
//	watermill.inbox.commit.failures        counter    {inbox.consumer, inbox.mode}
//	watermill.inbox.finished               counter    {inbox.consumer, inbox.mode, inbox.outcome}
//	watermill.inbox.dead_letters           counter    {inbox.consumer, inbox.reason}
//	watermill.inbox.nacks                  counter    {inbox.consumer, inbox.reason}
//	watermill.inbox.lease.takeovers        counter    {inbox.consumer}
//	watermill.inbox.lease.lost             counter    {inbox.consumer}
//	watermill.inbox.rows_cleaned           counter    {inbox.consumer, inbox.table}
//	watermill.inbox.fingerprint_conflicts  counter    {inbox.consumer, inbox.mode, inbox.action}
package otelinbox

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/effectively-once/watermill-inbox/observe"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/effectively-once/watermill-inbox/otelinbox"

// Attribute keys of the spans and metrics.
const (
	ConsumerKey = attribute.Key("inbox.consumer")
	EventIDKey  = attribute.Key("inbox.event_id")
	ModeKey     = attribute.Key("inbox.mode")
	OutcomeKey  = attribute.Key("inbox.outcome")
	ReasonKey   = attribute.Key("inbox.reason")
	ActionKey   = attribute.Key("inbox.action")
	AttemptKey  = attribute.Key("inbox.attempt")
	TableKey    = attribute.Key("inbox.table")
	MessageKey  = attribute.Key("messaging.message.id")
)

// OutcomeDuplicate is the outcome of the span of a skipped copy of an applied message.
const OutcomeDuplicate = "duplicate"

// DurationBuckets returns the boundaries, in seconds, of the claim and commit duration histograms: from half a
// millisecond, a claim on a local database, to ten seconds, a database that is struggling.
func DurationBuckets() []float64 { return slices.Clone(durationBuckets) }

var durationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Option configures NewObserver.
type Option func(*config)

type config struct {
	tracers    trace.TracerProvider
	meters     metric.MeterProvider
	propagator propagation.TextMapPropagator
}

// WithTracerProvider makes the spans with tp instead of the global tracer provider.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tracers = tp } }

// WithMeterProvider records the metrics with mp instead of the global meter provider.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.meters = mp } }

// WithPropagator reads the trace context of a message's metadata with p instead of W3C Trace Context
// (propagation.TraceContext), the format of the traceparent metadata key.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.propagator = p }
}

// Observer is an observe.Observer that reports to OpenTelemetry. Build it with NewObserver and pass it to
// inbox.WithObserver. It is safe for concurrent use; one Observer may serve several Inboxes and Cleaners.
type Observer struct {
	observe.NopObserver // for hooks a later version of the inbox adds

	tracer     trace.Tracer
	propagator propagation.TextMapPropagator

	claims, duplicates, commitFailures, finished metric.Int64Counter
	deadLetters, nacks, takeovers, leasesLost    metric.Int64Counter
	cleaned, conflicts                           metric.Int64Counter
	claimDuration, commitDuration                metric.Float64Histogram
}

var (
	_ observe.Observer      = (*Observer)(nil)
	_ observe.LeaseObserver = (*Observer)(nil)
)

// NewObserver creates the inbox's instruments and returns an Observer that records with them.
func NewObserver(opts ...Option) (*Observer, error) {
	c := config{}
	for _, opt := range opts {
		opt(&c)
	}
	if c.tracers == nil {
		c.tracers = otel.GetTracerProvider()
	}
	if c.meters == nil {
		c.meters = otel.GetMeterProvider()
	}
	if c.propagator == nil {
		c.propagator = propagation.TraceContext{}
	}
	meter := c.meters.Meter(ScopeName)
	o := &Observer{tracer: c.tracers.Tracer(ScopeName), propagator: c.propagator}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		ctr, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return ctr
	}
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(DurationBuckets()...))
		errs = append(errs, err)
		return h
	}
	o.claims = counter("watermill.inbox.claims", "{message}", "Messages the inbox claimed, counted before the handler ran.")
	o.claimDuration = histogram("watermill.inbox.claim.duration", "How long the inbox took to claim a message, or to find it applied before.")
	o.duplicates = counter("watermill.inbox.duplicates_skipped", "{message}", "Copies of applied messages, skipped without running the handler.")
	o.commitDuration = histogram("watermill.inbox.commit.duration", "How long the commit of a claimed message took, failed commits included.")
	o.commitFailures = counter("watermill.inbox.commit.failures", "{commit}", "Commits of claimed messages that failed.")
	o.finished = counter("watermill.inbox.finished", "{message}", "Claimed messages by how they ended.")
	o.deadLetters = counter("watermill.inbox.dead_letters", "{message}", "Messages published to the dead-letter topic, by reason.")
	o.nacks = counter("watermill.inbox.nacks", "{message}", "Messages the inbox held back for the reject delay, by reason.")
	o.takeovers = counter("watermill.inbox.lease.takeovers", "{lease}", "Expired leases taken over from a holder that died or hung.")
	o.leasesLost = counter("watermill.inbox.lease.lost", "{lease}", "Holders whose write was refused because their lease had been taken over.")
	o.cleaned = counter("watermill.inbox.rows_cleaned", "{row}", "Inbox rows deleted by the cleanup.")
	o.conflicts = counter("watermill.inbox.fingerprint_conflicts", "{message}", "Copies whose event ID was applied before for another message, by what became of them.")
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(errors.New("otelinbox: create the inbox's instruments"), err)
	}
	return o, nil
}

func byConsumer(consumer string, mode observe.Mode) metric.MeasurementOption {
	return metric.WithAttributes(ConsumerKey.String(consumer), ModeKey.String(string(mode)))
}

// Claimed counts the claim and starts the message's span, back-dated to when the claim began.
func (o *Observer) Claimed(ctx context.Context, e observe.ClaimEvent) context.Context {
	o.claims.Add(ctx, 1, byConsumer(e.Consumer, e.Mode))
	o.claimDuration.Record(ctx, e.Duration.Seconds(), byConsumer(e.Consumer, e.Mode))
	ctx, _ = o.start(ctx, e.Message, e.Consumer, e.EventID, e.Mode, time.Now().Add(-e.Duration), AttemptKey.Int(e.Attempt))
	return ctx
}

// DuplicateSkipped counts the copy and records a span from its claim to the skip.
func (o *Observer) DuplicateSkipped(ctx context.Context, e observe.SkipEvent) {
	o.duplicates.Add(ctx, 1, byConsumer(e.Consumer, e.Mode))
	o.claimDuration.Record(ctx, e.Duration.Seconds(), byConsumer(e.Consumer, e.Mode))
	_, span := o.start(ctx, e.Message, e.Consumer, e.EventID, e.Mode, time.Now().Add(-e.Duration), OutcomeKey.String(OutcomeDuplicate))
	span.End()
}

// Committed records the commit's duration, counts a failed one, and adds it to the message's span as an event.
func (o *Observer) Committed(ctx context.Context, e observe.CommitEvent) {
	o.commitDuration.Record(ctx, e.Duration.Seconds(), byConsumer(e.Consumer, e.Mode))
	attrs := []attribute.KeyValue{attribute.Float64("inbox.commit.duration", e.Duration.Seconds())}
	if e.Err != nil {
		o.commitFailures.Add(ctx, 1, byConsumer(e.Consumer, e.Mode))
		attrs = append(attrs, attribute.String("exception.message", e.Err.Error()))
	}
	trace.SpanFromContext(ctx).AddEvent("inbox.commit", trace.WithAttributes(attrs...))
}

// Finished counts the outcome and ends the message's span with it.
func (o *Observer) Finished(ctx context.Context, e observe.FinishEvent) {
	o.finished.Add(ctx, 1, metric.WithAttributes(ConsumerKey.String(e.Consumer), ModeKey.String(string(e.Mode)),
		OutcomeKey.String(string(e.Outcome))))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(OutcomeKey.String(string(e.Outcome)))
	if e.Err != nil {
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, string(e.Outcome))
	}
	span.End()
}

// DeadLettered counts the dead letter by its reason, and adds it to the current span as an event.
func (o *Observer) DeadLettered(ctx context.Context, e observe.DeadLetterEvent) {
	o.deadLetters.Add(ctx, 1, metric.WithAttributes(ConsumerKey.String(e.Consumer), ReasonKey.String(e.Reason)))
	trace.SpanFromContext(ctx).AddEvent("inbox.dead_letter", trace.WithAttributes(ReasonKey.String(e.Reason)))
}

// Nacked counts the held-back message by its reason, and adds it to the current span as an event.
func (o *Observer) Nacked(ctx context.Context, e observe.NackEvent) {
	o.nacks.Add(ctx, 1, metric.WithAttributes(ConsumerKey.String(e.Consumer), ReasonKey.String(e.Reason)))
	trace.SpanFromContext(ctx).AddEvent("inbox.nack", trace.WithAttributes(ReasonKey.String(e.Reason)))
}

// LeaseTakenOver counts the takeover.
func (o *Observer) LeaseTakenOver(ctx context.Context, e observe.LeaseEvent) {
	o.takeovers.Add(ctx, 1, metric.WithAttributes(ConsumerKey.String(e.Consumer)))
}

// LeaseLost counts the lost lease, and adds it to the message's span as an event.
func (o *Observer) LeaseLost(ctx context.Context, e observe.LeaseEvent) {
	o.leasesLost.Add(ctx, 1, metric.WithAttributes(ConsumerKey.String(e.Consumer)))
	trace.SpanFromContext(ctx).AddEvent("inbox.lease_lost", trace.WithAttributes(AttemptKey.Int(e.Attempt)))
}

// RowsCleaned adds the rows a cleanup batch deleted.
func (o *Observer) RowsCleaned(ctx context.Context, e observe.CleanupEvent) {
	o.cleaned.Add(ctx, e.Rows, metric.WithAttributes(ConsumerKey.String(e.Consumer), TableKey.String(e.Table)))
}

// FingerprintConflict counts a copy whose event ID was reused for another message, by what became of it (skipped,
// dead_lettered).
func (o *Observer) FingerprintConflict(ctx context.Context, e observe.ConflictEvent) {
	action := "skipped"
	if e.DeadLettered {
		action = "dead_lettered"
	}
	o.conflicts.Add(ctx, 1, metric.WithAttributes(ConsumerKey.String(e.Consumer), ModeKey.String(string(e.Mode)), ActionKey.String(action)))
}

// start starts a message's span at the given time: a child of the span ctx carries, or else of the trace context
// in the message's metadata, and linked to the latter when it is not the parent.
func (o *Observer) start(ctx context.Context, msg *message.Message, consumer, id string, mode observe.Mode, at time.Time, extra ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs := append([]attribute.KeyValue{ConsumerKey.String(consumer), EventIDKey.String(id), ModeKey.String(string(mode))}, extra...)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(at)}
	parent := ctx
	if msg != nil {
		attrs = append(attrs, MessageKey.String(msg.UUID))
		remote := trace.SpanContextFromContext(o.propagator.Extract(context.Background(), propagation.MapCarrier(msg.Metadata)))
		switch {
		case !remote.IsValid():
		case trace.SpanContextFromContext(ctx).IsValid():
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote}))
		default:
			parent = trace.ContextWithRemoteSpanContext(ctx, remote)
		}
	}
	return o.tracer.Start(parent, "inbox "+consumer, append(opts, trace.WithAttributes(attrs...))...)
}
