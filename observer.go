package inbox

// Observer is told what the inbox does, for metrics. The inbox calls it on the message's goroutine, so its methods
// must be cheap and safe for concurrent use. Embed NopObserver to implement only some methods and to keep
// compiling when Observer gains one. The prommetrics package implements it with Prometheus counters.
type Observer interface {
	// Claimed is called when a message is claimed for consumer, before its handler runs.
	Claimed(consumer string)
	// DuplicateSkipped is called when a message of consumer was applied before and its handler is skipped.
	DuplicateSkipped(consumer string)
	// DeadLettered is called when a message of consumer is published to the dead-letter topic. reason is a short,
	// bounded label (such as "missing_id" or "attempts_exhausted"), fit for a metric label.
	DeadLettered(consumer, reason string)
	// LeaseTakenOver is called in lease mode when a consumer takes over an expired lease of another holder.
	LeaseTakenOver(consumer string)
	// RowsCleaned is called after a cleanup batch deleted n inbox rows.
	RowsCleaned(n int64)
}

// NopObserver is an Observer that does nothing: the default, and a base to embed.
type NopObserver struct{}

// Claimed does nothing.
func (NopObserver) Claimed(string) {}

// DuplicateSkipped does nothing.
func (NopObserver) DuplicateSkipped(string) {}

// DeadLettered does nothing.
func (NopObserver) DeadLettered(string, string) {}

// LeaseTakenOver does nothing.
func (NopObserver) LeaseTakenOver(string) {}

// RowsCleaned does nothing.
func (NopObserver) RowsCleaned(int64) {}
