package maintain

import (
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
)

// Watch is the Cleaner's retention alarm. It compares each consumer's memory with the declared window, and
// raises the alarm only for a consumer it has seen covering the window before: a consumer that started less than
// the window ago remembers less than the window too, and is no fault. A consumer seen short from the start is
// noted once at info level instead, since it may also be one whose history was cut before this process started;
// the oldest-row age metric, kept by Prometheus across restarts, catches that case (docs/guides/retention.md).
type Watch struct {
	window  time.Duration
	short   error
	mu      sync.Mutex
	covered map[string]bool // seen remembering at least window
	noted   map[string]bool // seen short before ever covering, and logged once
}

// NewWatch returns the alarm for window; short is the sentinel its error wraps (inbox.ErrShortMemory).
func NewWatch(window time.Duration, short error) *Watch {
	return &Watch{window: window, short: short, covered: map[string]bool{}, noted: map[string]bool{}}
}

// Memory is how far back a consumer remembers (inbox.ConsumerMemory).
type Memory struct {
	Consumer string
	Oldest   time.Time
	Age      time.Duration
}

// Check logs what ms says about the window and returns the consumers whose memory dropped below it.
func (w *Watch) Check(ms []Memory, table string, logger watermill.LoggerAdapter) (dropped []Memory) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range ms {
		fields := watermill.LogFields{
			"table":     table,
			"consumer":  m.Consumer,
			"remembers": m.Age.Round(time.Second).String(),
			"window":    w.window.String(),
			"oldest":    m.Oldest,
		}
		switch {
		case m.Age >= w.window:
			w.covered[m.Consumer] = true
		case w.covered[m.Consumer]:
			dropped = append(dropped, m)
			logger.Error("Inbox remembers less than the redelivery window: rows were deleted too early",
				fmt.Errorf("%w: consumer %s remembers %s, the window is %s", w.short, m.Consumer,
					m.Age.Round(time.Second), w.window), fields)
		case !w.noted[m.Consumer]:
			w.noted[m.Consumer] = true
			logger.Info("Inbox remembers less than the redelivery window for a consumer younger than the window, "+
				"or whose history was deleted before this cleaner started", fields)
		}
	}
	return dropped
}
