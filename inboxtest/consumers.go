package inboxtest

import (
	"github.com/effectively-once/watermill-inbox/internal/testkit"
)

// NackRecorder is an Observer that keeps the events of the messages an inbox nacked or held back, for a test to
// wait for and read (Events, oldest first).
type NackRecorder = testkit.NackRecorder
