package inbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

func TestDefaultLogger(t *testing.T) {
	t.Parallel()

	// quiet builds an Inbox over b's table with no WithLogger, its default logger writing to out.
	quiet := func(t *testing.T, b *testBundle, out *testkit.LockedBuffer, opts ...inbox.Option) *inbox.Inbox {
		t.Helper()
		ib, err := inbox.New(b.db, append([]inbox.Option{inbox.WithTable(b.Table), inbox.WithConsumer("wallet-credits"),
			inbox.WithRejectDelay(time.Millisecond), inbox.WithDefaultLogOutput(out)}, opts...)...)
		require.NoError(t, err)
		return ib
	}

	t.Run("LogsAMessageWithoutAnEventIDAtError", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		out := &testkit.LockedBuffer{}
		_, err := quiet(t, b, out).Middleware(b.Credit(100, nil))(newMsg(""))
		require.ErrorIs(t, err, inbox.ErrInvalidEventID)

		lines := out.Lines("Inbox cannot apply message;")
		require.Len(t, lines, 1, "what holds a message back reaches the default output:\n%s", out)
		require.Contains(t, lines[0], "level=ERROR")
		require.Contains(t, lines[0], "invalid event ID")
	})

	t.Run("LogsASchemaThatHoldsEveryMessageBackAtError", func(t *testing.T) {
		t.Parallel()
		db := openDB(t)
		b := &testBundle{db: db, Wallet: &testkit.Wallet{Table: testkit.UniqueName("inbox_missing")}} // no table, and none created
		out := &testkit.LockedBuffer{}
		_, err := quiet(t, b, out, inbox.WithAutoMigrate(false)).Middleware(b.Credit(100, nil))(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrSchemaMissing)

		lines := out.Lines("Inbox cannot apply messages;")
		require.Len(t, lines, 1, "what holds every message back reaches the default output:\n%s", out)
		require.Contains(t, lines[0], "level=ERROR")
		require.Contains(t, lines[0], b.Table)
	})

	t.Run("KeepsDebugAndInfoQuiet", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		out := &testkit.LockedBuffer{}
		h := quiet(t, b, out).Middleware(b.Credit(100, nil))
		for range 2 { // the second is a duplicate, which is logged at info
			_, err := h(newMsg("evt-1"))
			require.NoError(t, err)
		}
		require.Equal(t, 100, b.Balance(t))
		require.Empty(t, out.String(), "an applied message and a skipped duplicate log nothing by default")
	})

	t.Run("GivesWayToWithLogger", func(t *testing.T) {
		t.Parallel()
		b := newBundle(t)
		out, logs := &testkit.LockedBuffer{}, &recordingLogger{}
		_, err := quiet(t, b, out, inbox.WithLogger(logs)).Middleware(b.Credit(100, nil))(newMsg(""))
		require.ErrorIs(t, err, inbox.ErrInvalidEventID)
		require.Empty(t, out.String())
		require.Len(t, logs.Find("cannot apply message"), 1)
	})
}

func TestNoDeadLetterWarning(t *testing.T) {
	t.Parallel()
	const warning = "Inbox has no dead-letter topic"

	t.Run("IsLoggedOncePerInboxAtTheFirstUnusableMessage", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithRejectDelay(time.Millisecond))
		h := ib.Middleware(b.Credit(100, nil))
		_, err := h(newMsg("evt-1"))
		require.NoError(t, err)
		require.Empty(t, b.Logs.Find(warning), "a usable message says nothing of dead letters")

		for range 3 {
			_, err := h(newMsg(""))
			require.ErrorIs(t, err, inbox.ErrInvalidEventID)
		}
		found := b.Logs.Find(warning)
		require.Len(t, found, 1, "once, however many messages are held back")
		require.Equal(t, "error", found[0].Level)
		require.Contains(t, found[0].Msg, "WithDeadLetter")
		require.Contains(t, found[0].Msg, "held back")
		require.Len(t, b.Logs.Find("cannot apply message;"), 3, "each message is still logged with its reason")

		other, err := inbox.New(b.db, b.opts...)
		require.NoError(t, err)
		_, err = other.Middleware(b.Credit(100, nil))(newMsg(""))
		require.ErrorIs(t, err, inbox.ErrInvalidEventID)
		require.Len(t, b.Logs.Find(warning), 2, "once per Inbox")
	})

	t.Run("IsLoggedWhenLeaseModeGivesUp", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithLease(time.Hour), inbox.WithMaxAttempts(1), inbox.WithRejectDelay(time.Millisecond))
		failing := func(*message.Message) ([]*message.Message, error) { return nil, errors.New("provider down") }
		_, err := ib.Middleware(failing)(newMsg("evt-1"))
		require.ErrorIs(t, err, inbox.ErrAttemptsExhausted)
		require.Len(t, b.Logs.Find(warning), 1)
	})

	t.Run("IsNotLoggedWithADeadLetterTopic", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithDeadLetter(&testkit.RecordingPublisher{}, "deposits.dlq"))
		_, err := ib.Middleware(b.Credit(100, nil))(newMsg(""))
		require.NoError(t, err)
		require.Empty(t, b.Logs.Find(warning))
	})
}
