package inbox

import "github.com/effectively-once/watermill-inbox/internal/batch"

// HoldBatches keeps any batch of consumer from beginning until release is called, so that a test can gather the
// messages of one batch.
func HoldBatches(i *Inbox, consumer string) (release func()) {
	return i.batches.Hold(consumer)
}

// EarlyBatch is the fewest messages a batch begins with before its wait to fill is over.
const EarlyBatch = batch.EarlyBatch
