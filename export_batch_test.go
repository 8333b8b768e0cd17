package inbox

// HoldBatches keeps any batch of consumer from beginning until release is called, so that a test can gather the
// messages of one batch.
func HoldBatches(i *Inbox, consumer string) (release func()) {
	q := i.queueOf(consumer)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held = true
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.held = false
		q.startReady()
	}
}

// EarlyBatch is earlyBatch: the fewest messages a batch begins with before its wait to fill is over.
const EarlyBatch = earlyBatch
