// Package maintain runs the inbox's maintenance over any dialect: a cleanup round and the managed partitions.
// The inbox package holds their exported API and its checks; what runs here gets its database, its table and what
// to report through an Env.
package maintain

import (
	"context"
	"time"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/effectively-once/watermill-inbox/dialect"
	"github.com/effectively-once/watermill-inbox/driver"
)

// Env is what a maintenance pass works with.
type Env struct {
	Pool    driver.Pool
	Dialect dialect.Dialect
	Table   string
	Logger  watermill.LoggerAdapter
	// ShortTx runs fn in a short transaction of its own (dialect.InShortTx, with the inbox's explanations).
	ShortTx func(ctx context.Context, fn func(tx driver.Tx) error) error
	// Wrap names the operation and the table in a database error, and a missing schema as the inbox's sentinel.
	Wrap func(op string, err error) error
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
