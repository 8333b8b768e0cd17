// Package maintain runs the inbox's maintenance over any dialect: a cleanup round and the managed partitions.
// The inbox package holds their exported API and its checks; what runs here gets its database, its table and what
// to report through an Env.
package maintain

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/internal/store"
)

// Env is what a maintenance pass works with: the store of the operations off a message's path (its pool, dialect
// and table, its short transactions and its reading of database errors) and what to report through.
type Env struct {
	store.Ops
	Logger watermill.LoggerAdapter
	// Invalid is the sentinel that wraps an error of the caller's configuration (inbox.ErrInvalidOption).
	Invalid error
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
