package inboxtest

import (
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// RecordingLogger is a watermill.LoggerAdapter that keeps what the inbox logs, with its level, error and fields,
// so that a test checks what an operator would see. Its zero value is ready to use.
type RecordingLogger = testkit.RecordingLogger

// LogEntry is one logged message.
type LogEntry = testkit.LogEntry

// RecordingPublisher keeps copies of what is published to it, for dead letters and produced messages, and fails
// its first FailFirst publishes as a broker that is down would.
type RecordingPublisher = testkit.RecordingPublisher
