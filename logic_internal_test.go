package inbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/dialect/postgres"
	"github.com/effectively-once/watermill-inbox/internal/readiness"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/store"
)

// The tests of this file need no database: they check the logic the middleware runs before and after its SQL, and
// run under -short.

func TestConfig_DefaultsAreTheDocumentedOnes(t *testing.T) {
	t.Parallel()
	c, err := newConfig(nil)
	require.NoError(t, err)
	require.Equal(t, DefaultIDMetadataKey, c.idKey)
	require.Equal(t, DefaultTable, c.table)
	require.Equal(t, DefaultMaxIDLength, c.maxIDLength)
	require.Equal(t, DefaultRejectDelay, c.rejectDelay)
	require.Equal(t, IDTypeText, c.idType)
	require.True(t, c.autoMigrate)
	require.True(t, c.subscriberTx)
	require.Zero(t, c.lease, "transaction mode unless WithLease")

	leased, err := newConfig([]Option{WithLease(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, DefaultMaxAttempts, leased.maxAttempts, "lease mode counts attempts from its default")
}

func TestConfig_RejectsEachMisuseNamingTheOption(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		opts []Option
		name string // what the error must name
	}{
		"ANilOption":               {[]Option{WithTable("billing_inbox"), nil}, "option 2 of 2 is nil"},
		"AnEmptyMetadataKey":       {[]Option{WithIDMetadataKey("")}, "WithIDMetadataKey"},
		"ATableNameWithCapitals":   {[]Option{WithTable("Billing")}, `WithTable("Billing")`},
		"ATableNameWithADot":       {[]Option{WithTable("public.billing")}, `WithTable("public.billing")`},
		"ATableNameTooLong":        {[]Option{WithTable(strings.Repeat("t", 49))}, "WithTable"},
		"ANilDeadLetterPublisher":  {[]Option{WithDeadLetter(nil, "deposits.dlq")}, "the publisher is nil"},
		"AnEmptyDeadLetterTopic":   {[]Option{WithDeadLetter(nopPublisher{}, "")}, "the topic is empty"},
		"AnUnknownIDType":          {[]Option{WithIDType("bigint")}, `WithIDType("bigint")`},
		"AMaxIDLengthOfZero":       {[]Option{WithMaxIDLength(0)}, "WithMaxIDLength(0)"},
		"AMaxIDLengthPastTheLimit": {[]Option{WithMaxIDLength(2001)}, "WithMaxIDLength(2001)"},
		"ALeaseTooShort":           {[]Option{WithLease(time.Millisecond)}, "WithLease(1ms)"},
		"MaxAttemptsWithoutLease":  {[]Option{WithMaxAttempts(3)}, "add WithLease"},
		"ZeroMaxAttempts":          {[]Option{WithLease(time.Second), WithMaxAttempts(0)}, "WithMaxAttempts(0)"},
		"ANegativeRejectDelay":     {[]Option{WithRejectDelay(-time.Second)}, "WithRejectDelay(-1s)"},
		"AnEmptyConsumer":          {[]Option{WithConsumer("")}, "WithConsumer"},
		"AConsumerPastTheLimit":    {[]Option{WithConsumer(strings.Repeat("c", MaxConsumerLength+1))}, "over the limit"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := newConfig(tc.opts)
			require.ErrorIs(t, err, ErrInvalidOption)
			require.ErrorContains(t, err, tc.name)
		})
	}
	_, err := newConfig([]Option{WithIDMetadataKey(""), WithMessageUUIDAsID()})
	require.NoError(t, err, "the metadata key is unused when the UUID is the ID")
}

type nopPublisher struct{}

func (nopPublisher) Publish(string, ...*message.Message) error { return nil }
func (nopPublisher) Close() error                              { return nil }

// inboxWith returns an Inbox built from opts that must not touch its database: it has none.
func inboxWith(t *testing.T, opts ...Option) *Inbox {
	t.Helper()
	c, err := newConfig(opts)
	require.NoError(t, err)
	s := store.New(postgres.Dialect(), c.table, nil)
	return &Inbox{&core{cfg: c, store: s, readiness: readiness.New[IDType](s.Losses())}}
}

func TestIdentify_ReadsTheEventIDAndRefusesOneItCannotStore(t *testing.T) {
	t.Parallel()
	msg := func(id string, set bool) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), nil)
		if set {
			m.Metadata.Set(DefaultIDMetadataKey, id)
		}
		m.SetContext(context.Background())
		return m
	}
	text := inboxWith(t, WithConsumer("wallet-credits"))

	consumer, id, err := text.identify(msg("evt-1", true))
	require.NoError(t, err)
	require.Equal(t, "wallet-credits", consumer)
	require.Equal(t, "evt-1", id)

	_, _, err = text.identify(msg("", false))
	require.ErrorIs(t, err, ErrMissingEventID)
	for name, bad := range map[string]string{
		"Empty":       "",
		"OverLimit":   strings.Repeat("a", DefaultMaxIDLength+1),
		"NULByte":     "evt\x00-1",
		"InvalidUTF8": "evt-\xff",
	} {
		_, _, err := text.identify(msg(bad, true))
		require.ErrorIs(t, err, ErrInvalidEventID, name)
	}
	_, _, err = text.identify(msg(strings.Repeat("a", DefaultMaxIDLength), true))
	require.NoError(t, err, "the limit itself is accepted")

	byUUID := inboxWith(t, WithConsumer("wallet-credits"), WithMessageUUIDAsID())
	m := msg("evt-1", true)
	_, id, err = byUUID.identify(m)
	require.NoError(t, err)
	require.Equal(t, m.UUID, id)

	uuids := inboxWith(t, WithConsumer("wallet-credits"), WithIDType(IDTypeUUID))
	_, id, err = uuids.identify(msg("{0F8FAD5B-D9CB-469F-A165-70867728950E}", true))
	require.NoError(t, err)
	require.Equal(t, "0f8fad5b-d9cb-469f-a165-70867728950e", id, "one spelling per UUID, the one PostgreSQL returns")
	_, _, err = uuids.identify(msg("evt-1", true))
	require.ErrorIs(t, err, ErrInvalidEventID)

	_, _, err = inboxWith(t).identify(msg("evt-1", true))
	require.ErrorIs(t, err, ErrNoConsumer, "no WithConsumer and no router to name the handler")
}

func TestProducedEncoding_RoundTripsEveryByteWatermillAllows(t *testing.T) {
	t.Parallel()
	first := message.NewMessage(ProducedMessageUUID("wallet-credits", "evt-1", 0), []byte{0, 0xff, 'a'})
	first.Metadata.Set("event_id", "evt-1-out")
	first.Metadata.Set("nul", "a\x00b")
	first.Metadata.Set("bytes\xfe", "\xff")
	second := message.NewMessage(ProducedMessageUUID("wallet-credits", "evt-1", 1), nil)

	raw, err := store.EncodeProduced("wallet-credits", "evt-1", []*message.Message{first, second})
	require.NoError(t, err)
	got, err := store.DecodeProduced("wallet-credits", "evt-1", raw)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, want := range []*message.Message{first, second} {
		require.Equal(t, want.UUID, got[i].UUID)
		require.Equal(t, []byte(want.Payload), []byte(got[i].Payload))
		require.Equal(t, want.Metadata, got[i].Metadata)
	}
	require.NotContains(t, string(raw), "\\u0000", "jsonb refuses NUL: it travels in base64")

	none, err := store.EncodeProduced("wallet-credits", "evt-1", nil)
	require.NoError(t, err)
	require.Nil(t, none, "no produced messages store SQL NULL")
	msgs, err := store.DecodeProduced("wallet-credits", "evt-1", nil)
	require.NoError(t, err)
	require.Nil(t, msgs)

	_, err = store.EncodeProduced("wallet-credits", "evt-1", []*message.Message{first, nil})
	require.ErrorIs(t, err, ErrProducedUnstorable)
	require.ErrorContains(t, err, "message 1 is nil")
	_, err = store.DecodeProduced("wallet-credits", "evt-1", []byte(`{"not":"a list"}`))
	require.ErrorContains(t, err, "decode produced messages of wallet-credits/evt-1")
}

func TestSchemaReport_NamesAnOldLayoutAndEachDifference(t *testing.T) {
	t.Parallel()
	require.NoError(t, schemaErr(dialect.SchemaReport{IDType: "text"}, "billing_inbox"))
	missing := schemaErr(dialect.SchemaReport{Missing: true}, "billing_inbox")
	require.ErrorIs(t, missing, ErrSchemaMissing)
	require.ErrorContains(t, missing, "billing_inbox")

	outdated := schemaErr(dialect.SchemaReport{Outdated: true, Wrong: []string{"table billing_inbox: column consumer_id does not exist"}}, "billing_inbox")
	require.ErrorIs(t, outdated, ErrSchemaDrift)
	require.ErrorContains(t, outdated, "table billing_inbox has the layout of an older version of the inbox: run inbox.Migrate",
		"an old layout is named as such, not as a list of differences")

	absentOnly := dialect.SchemaReport{Absent: []string{"index billing_inbox_processing"}}
	require.True(t, absentOnly.Incomplete(), "whole objects missing: a migration can add them")
	drift := dialect.SchemaReport{Absent: []string{"index billing_inbox_processing"}, Wrong: []string{"column message_id is bigint"}}
	require.False(t, drift.Incomplete(), "a wrong object is left to an operator")
	err := schemaErr(drift, "billing_inbox")
	require.ErrorIs(t, err, ErrSchemaDrift)
	require.ErrorContains(t, err, "column message_id is bigint; index billing_inbox_processing")
}
