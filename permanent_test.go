package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	inbox "github.com/effectively-once/watermill-inbox"
	"github.com/effectively-once/watermill-inbox/internal/require"
)

func TestIsPermanent_NamesTheFaultsARetryCannotMend(t *testing.T) {
	t.Parallel()
	permanent := []error{
		inbox.ErrMissingEventID, inbox.ErrInvalidEventID, inbox.ErrProducedUnstorable, inbox.ErrAttemptsExhausted,
		inbox.ErrNoConsumer, inbox.ErrInvalidOption, inbox.ErrSchemaMissing, inbox.ErrSchemaDrift, inbox.ErrConsumerIDsExhausted,
	}
	for _, err := range permanent {
		require.True(t, inbox.IsPermanent(err), "%v", err)
		wrapped := fmt.Errorf("inbox: dead-letter message m-1 to deposits.dlq: broker down (reason: %w)", err)
		require.True(t, inbox.IsPermanent(wrapped), "wrapped: %v", wrapped)
		require.True(t, inbox.IsPermanent(errors.Join(err, errors.New("release lease: connection reset"))), "joined: %v", err)
	}
	transient := []error{
		nil, inbox.ErrLeaseHeld, inbox.ErrLeaseLost, context.Canceled, context.DeadlineExceeded,
		errors.New("payment provider: 503"), fmt.Errorf("inbox: commit wallet-credits/evt-1: %w", errors.New("connection reset")),
	}
	for _, err := range transient {
		require.False(t, inbox.IsPermanent(err), "%v", err)
	}
}

func TestRetry_WithIsPermanent(t *testing.T) {
	t.Parallel()

	// retried wraps the inbox's middleware, counting each time Retry runs it, in Retry set up as the README shows.
	retried := func(ib *inbox.Inbox, h message.HandlerFunc, attempts *atomic.Int64) message.HandlerFunc {
		counted := func(msg *message.Message) ([]*message.Message, error) {
			attempts.Add(1)
			return ib.Middleware(h)(msg)
		}
		return middleware.Retry{
			MaxRetries:      3,
			InitialInterval: time.Millisecond,
			ShouldRetry:     func(p middleware.RetryParams) bool { return !inbox.IsPermanent(p.Err) },
		}.Middleware(counted)
	}

	t.Run("RunsAMessageWithoutAnEventIDOnceNotMaxRetriesPlusOneTimes", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t, inbox.WithRejectDelay(20*time.Millisecond))
		var attempts, calls atomic.Int64
		msg := message.NewMessage(watermill.NewUUID(), []byte(`{"account_id":1,"amount":100}`))
		_, err := retried(ib, b.Credit(100, &calls), &attempts)(msg)
		require.ErrorIs(t, err, inbox.ErrMissingEventID, "nacked with the reason")
		require.Equal(t, int64(1), attempts.Load(), "one reject delay per delivery, not one per retry")
		require.Zero(t, calls.Load())
	})

	t.Run("StillRetriesAHandlerThatFails", func(t *testing.T) {
		t.Parallel()
		ib, b := setup(t)
		var attempts atomic.Int64
		failing := func(*message.Message) ([]*message.Message, error) {
			return nil, errors.New("payment provider: 503")
		}
		_, err := retried(ib, failing, &attempts)(newMsg("evt-1"))
		require.ErrorContains(t, err, "503")
		require.Equal(t, int64(4), attempts.Load(), "the first run and MaxRetries retries")
		require.Equal(t, 0, b.Rows(t, "wallet-credits"), "every failed attempt rolled back its claim")
	})
}
