package otelinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/inboxtest"
	"github.com/effectively-once/watermill-inbox/otelinbox"
)

// TestMain runs the tests in a database of their own, dropped at the end.
func TestMain(m *testing.M) {
	os.Exit(inboxtest.RunInOwnDatabases(m, inboxtest.PostgresDatabase("postgres")))
}

// A trace context as an upstream publisher writes it into the message's metadata.
const (
	upstreamTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	upstreamSpan  = "00f067aa0ba902b7"
	traceparent   = "00-" + upstreamTrace + "-" + upstreamSpan + "-01"
)

// bundle is an Observer wired to in-memory exporters, and an inbox table no other test uses.
type bundle struct {
	db      *sql.DB
	table   string
	obs     *otelinbox.Observer
	spans   *tracetest.InMemoryExporter
	reader  *sdkmetric.ManualReader
	tracers *sdktrace.TracerProvider
}

func setup(t *testing.T) *bundle {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL; run without -short")
	}
	dsn := os.Getenv("INBOX_TEST_DATABASE_URL")
	if dsn == "" {
		dsn = "postgres://root@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("PostgreSQL is not reachable at %s (set INBOX_TEST_DATABASE_URL): %v", dsn, err)
	}
	table := fmt.Sprintf("inbox_test_otel_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9)
	require.NoError(t, inbox.OnSQL(db).Migrate(context.Background(), inbox.WithTable(table)))
	t.Cleanup(func() {
		_, _ = db.Exec(`DROP TABLE IF EXISTS ` + table + `, ` + table + `_produced, ` + table + `_locks, ` + table + `_migrations, ` + table + `_consumers CASCADE`)
		_, _ = db.Exec(`DROP FUNCTION IF EXISTS ` + table + `_unfinished_claim()`)
	})

	b := &bundle{db: db, table: table, spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	b.tracers = sdktrace.NewTracerProvider(sdktrace.WithSyncer(b.spans))
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	b.obs, err = otelinbox.NewObserver(otelinbox.WithTracerProvider(b.tracers), otelinbox.WithMeterProvider(meters))
	require.NoError(t, err)
	return b
}

func (b *bundle) inbox(t *testing.T, opts ...inbox.Option) *inbox.Inbox {
	t.Helper()
	ib, err := inbox.New(b.db, append([]inbox.Option{inbox.WithTable(b.table), inbox.WithConsumer("wallet-credits"),
		inbox.WithObserver(b.obs), inbox.WithLogger(watermill.NopLogger{})}, opts...)...)
	require.NoError(t, err)
	return ib
}

// span returns the one exported span named name.
func (b *bundle) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range b.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans named %q", name)
	return found[0]
}

func newMsg(id string, withTraceparent bool) *message.Message {
	msg := message.NewMessage(watermill.NewUUID(), nil)
	msg.Metadata.Set(inbox.DefaultIDMetadataKey, id)
	if withTraceparent {
		msg.Metadata.Set("traceparent", traceparent)
	}
	msg.SetContext(context.Background())
	return msg
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		out[kv.Key] = kv.Value
	}
	return out
}

func TestObserver_Spans(t *testing.T) {
	t.Parallel()

	t.Run("AClaimedMessageGetsASpanThatIsAChildOfItsTraceparentAndTheParentOfTheHandlersSpans", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := newMsg("evt-1", true)
		_, err := b.inbox(t).Middleware(func(m *message.Message) ([]*message.Message, error) {
			_, span := b.tracers.Tracer("handler").Start(m.Context(), "credit wallet")
			span.End()
			return nil, nil
		})(msg)
		require.NoError(t, err)

		s := b.span(t, "inbox wallet-credits")
		require.Equal(t, upstreamTrace, s.SpanContext.TraceID().String())
		require.Equal(t, upstreamSpan, s.Parent.SpanID().String(), "the message's trace context is the parent")
		require.True(t, s.Parent.IsRemote())
		require.Empty(t, s.Links, "no link repeats the parent")
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
		a := attrs(s)
		require.Equal(t, "wallet-credits", a[otelinbox.ConsumerKey].AsString())
		require.Equal(t, "evt-1", a[otelinbox.EventIDKey].AsString())
		require.Equal(t, "transaction", a[otelinbox.ModeKey].AsString())
		require.Equal(t, "committed", a[otelinbox.OutcomeKey].AsString())
		require.Equal(t, msg.UUID, a[otelinbox.MessageKey].AsString())
		require.Equal(t, codes.Unset, s.Status.Code)
		require.True(t, s.EndTime.After(s.StartTime))
		require.Len(t, s.Events, 1)
		require.Equal(t, "inbox.commit", s.Events[0].Name)

		h := b.span(t, "credit wallet")
		require.Equal(t, s.SpanContext.SpanID(), h.Parent.SpanID(), "the handler runs inside the inbox's span")
	})

	t.Run("ASpanInTheMessageContextIsTheParentAndTheTraceparentALink", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		msg := newMsg("evt-1", true)
		ctx, outer := b.tracers.Tracer("router").Start(context.Background(), "router handler")
		msg.SetContext(ctx)
		_, err := b.inbox(t).Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(msg)
		require.NoError(t, err)
		outer.End()

		s := b.span(t, "inbox wallet-credits")
		require.Equal(t, outer.SpanContext().SpanID(), s.Parent.SpanID())
		require.Len(t, s.Links, 1)
		require.Equal(t, upstreamTrace, s.Links[0].SpanContext.TraceID().String())
		require.Equal(t, upstreamSpan, s.Links[0].SpanContext.SpanID().String())
	})

	t.Run("AMessageWithoutATraceContextStartsATrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.inbox(t).Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(newMsg("evt-1", false))
		require.NoError(t, err)
		s := b.span(t, "inbox wallet-credits")
		require.False(t, s.Parent.IsValid())
		require.Empty(t, s.Links)
	})

	t.Run("AFailedHandlerEndsTheSpanWithAnErrorAndADuplicateGetsASpanOfItsOwn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ib := b.inbox(t, inbox.WithLease(time.Minute))
		_, err := ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, errors.New("provider down") })(newMsg("evt-1", true))
		require.Error(t, err)
		failed := b.span(t, "inbox wallet-credits")
		require.Equal(t, "failed", attrs(failed)[otelinbox.OutcomeKey].AsString())
		require.Equal(t, "lease", attrs(failed)[otelinbox.ModeKey].AsString())
		require.Equal(t, int64(1), attrs(failed)[otelinbox.AttemptKey].AsInt64())
		require.Equal(t, codes.Error, failed.Status.Code)

		b.spans.Reset()
		for range 2 {
			_, err = ib.Middleware(func(*message.Message) ([]*message.Message, error) { return nil, nil })(newMsg("evt-1", true))
			require.NoError(t, err)
		}
		spans := b.spans.GetSpans()
		require.Len(t, spans, 2)
		require.Equal(t, "committed", attrs(spans[0])[otelinbox.OutcomeKey].AsString())
		require.Equal(t, int64(2), attrs(spans[0])[otelinbox.AttemptKey].AsInt64())
		require.Equal(t, "duplicate", attrs(spans[1])[otelinbox.OutcomeKey].AsString())
		require.Equal(t, upstreamSpan, spans[1].Parent.SpanID().String())
	})
}

func TestObserver_RecordsMetricsForTheInboxsEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ib := b.inbox(t)
	noop := func(*message.Message) ([]*message.Message, error) { return nil, nil }
	for _, id := range []string{"evt-1", "evt-1", "evt-2"} {
		_, err := ib.Middleware(noop)(newMsg(id, false))
		require.NoError(t, err)
	}
	_, err := b.inbox(t, inbox.WithRejectDelay(time.Millisecond)).Middleware(noop)(message.NewMessage(watermill.NewUUID(), nil))
	require.ErrorIs(t, err, inbox.ErrMissingEventID)
	// A reused event ID under fingerprints: evt-3 says "paid", then "refunded", which is skipped and reported.
	fingerprinted := b.inbox(t, inbox.WithFingerprint(inbox.Fingerprint{})).Middleware(noop)
	for _, payload := range []string{"paid", "refunded"} {
		msg := newMsg("evt-3", false)
		msg.Payload = []byte(payload)
		_, err = fingerprinted(msg)
		require.NoError(t, err)
	}
	// Seven rows of a consumer no process runs, written 30 days ago (minutes since 1970, as the table stores them).
	_, err = b.db.Exec(`WITH c AS (
			INSERT INTO ` + b.table + `_consumers (name) VALUES ('archive')
			ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id
		)
		INSERT INTO ` + b.table + ` (consumer_id, message_id, processed_at)
		SELECT c.id, 'old-' || g, (floor(extract(epoch FROM now() - interval '30 days') / 60))::integer
		FROM c, generate_series(1, 7) g`)
	require.NoError(t, err)
	_, err = inbox.OnSQL(b.db).Cleanup(context.Background(), inbox.CleanupParams{}, inbox.WithTable(b.table), inbox.WithObserver(b.obs))
	require.NoError(t, err)

	var rm metricdata.ResourceMetrics
	require.NoError(t, b.reader.Collect(context.Background(), &rm))
	got := map[string]map[attribute.Distinct]float64{} // name -> attribute set -> sum or count
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelinbox.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			got[m.Name] = map[attribute.Distinct]float64{}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name][p.Attributes.Equivalent()] = float64(p.Value)
				}
			case metricdata.Histogram[float64]:
				require.Equal(t, "s", m.Unit)
				for _, p := range d.DataPoints {
					require.Positive(t, p.Sum, "%s: every duration is above zero", m.Name)
					got[m.Name][p.Attributes.Equivalent()] = float64(p.Count)
				}
			}
		}
	}
	set := func(kvs ...attribute.KeyValue) attribute.Distinct {
		s := attribute.NewSet(kvs...)
		return s.Equivalent()
	}
	wallet := []attribute.KeyValue{otelinbox.ConsumerKey.String("wallet-credits"), otelinbox.ModeKey.String("transaction")}
	require.Equal(t, 3.0, got["watermill.inbox.claims"][set(wallet...)])
	require.Equal(t, 2.0, got["watermill.inbox.duplicates_skipped"][set(wallet...)], "a copy, and the skipped conflict")
	require.Equal(t, 5.0, got["watermill.inbox.claim.duration"][set(wallet...)])
	require.Equal(t, 3.0, got["watermill.inbox.commit.duration"][set(wallet...)])
	require.Equal(t, 3.0, got["watermill.inbox.finished"][set(append(wallet, otelinbox.OutcomeKey.String("committed"))...)])
	require.Equal(t, 1.0, got["watermill.inbox.fingerprint_conflicts"][set(append(wallet, otelinbox.ActionKey.String("skipped"))...)])
	require.Equal(t, 1.0, got["watermill.inbox.nacks"][set(otelinbox.ConsumerKey.String("wallet-credits"), otelinbox.ReasonKey.String("missing_id"))])
	require.Equal(t, 7.0, got["watermill.inbox.rows_cleaned"][set(otelinbox.ConsumerKey.String("archive"), otelinbox.TableKey.String(b.table))])
}
