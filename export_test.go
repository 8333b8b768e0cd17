package inbox

// BatchPending reports how many messages of consumer wait for a batch, for tests that must know a batch is full
// before they let it begin.
func BatchPending(i *Inbox, consumer string) int {
	return i.batches.Pending(consumer)
}
