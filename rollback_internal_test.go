package inbox

import (
	"context"
	"database/sql/driver"
	"fmt"
	"sync"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/effectively-once/watermill-inbox/internal/require"
)

// levelLogger records the level of each entry.
type levelLogger struct {
	mu     sync.Mutex
	levels []string
}

func (l *levelLogger) add(level string) {
	l.mu.Lock()
	l.levels = append(l.levels, level)
	l.mu.Unlock()
}
func (l *levelLogger) Error(string, error, watermill.LogFields)         { l.add("error") }
func (l *levelLogger) Info(string, watermill.LogFields)                 { l.add("info") }
func (l *levelLogger) Debug(string, watermill.LogFields)                { l.add("debug") }
func (l *levelLogger) Trace(string, watermill.LogFields)                { l.add("trace") }
func (l *levelLogger) With(watermill.LogFields) watermill.LoggerAdapter { return l }

func TestRollbackFailed_IsAnErrorOnlyWhileTheMessagesContextLives(t *testing.T) {
	t.Parallel()
	badConn := fmt.Errorf("inbox: rollback: %w", driver.ErrBadConn)
	for name, tc := range map[string]struct {
		cancel bool
		err    error
		want   []string
	}{
		"ShutdownMidSkipIsNoError":      {cancel: true, err: badConn, want: []string{"debug"}},
		"ARealFailureIsAnError":         {cancel: false, err: badConn, want: []string{"error"}},
		"NothingFailedLogsNothing":      {cancel: false, err: nil, want: nil},
		"NothingFailedOnShutdownEither": {cancel: true, err: nil, want: nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			logs := &levelLogger{}
			i := &Inbox{&core{cfg: config{logger: logs}}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			msg := message.NewMessage("m-1", nil)
			msg.SetContext(ctx)
			i.rollbackFailed(msg, "wallet-credits", "evt-1", "rollback", tc.err)
			require.Equal(t, tc.want, logs.levels)
		})
	}
}
