package main

import (
	"flag"
	"fmt"
	"time"

	inbox "github.com/effectively-once/watermill-inbox"
)

// variant is how a consumer orders its acknowledgement and its database commit.
type variant string

const (
	// atMostOnce acks before the handler runs (Watermill's InstantAck middleware); no inbox.
	atMostOnce variant = "at-most-once"
	// afterDB acks after the database commit, with watermill-kafka's defaults: Sarama marks the offset on ack
	// and commits marked offsets in the background every second.
	afterDB variant = "after-db"
	// afterDBSync acks after the database commit and commits the offset synchronously on every ack:
	// watermill-kafka calls session.Commit() after each mark when Sarama's auto-commit is disabled.
	afterDBSync variant = "after-db-sync"
	// inboxVariant is this library: the credit and the event ID commit in one transaction, then the ack, with
	// watermill-kafka's defaults for the offset.
	inboxVariant variant = "inbox"
	// batchVariant is the inbox in batch mode (WithBatch): the handlers in flight at once share one transaction,
	// one claim statement and one commit, then each is acked.
	batchVariant variant = "batch"
	// batchPgxVariant is batchVariant on pgx v5: pgxinbox over a pgxpool.Pool, the handler crediting on the pgx.Tx
	// of pgxinbox.TxFromContext.
	batchPgxVariant variant = "batch-pgx"
	// partitionedVariant is inboxVariant on a table of managed partitions (WithPartitions, one an hour) keyed by
	// uuid: the events carry UUIDv7 IDs (StampUUIDv7), so each claim lands in the partition of its ID's hour.
	partitionedVariant variant = "inbox-partitioned"
	// atCommitVariant is inboxVariant on pgx v5 with the claim sent with COMMIT (WithClaimAtCommit): pgxinbox over
	// a pgxpool.Pool, the handler crediting on the pgx.Tx of pgxinbox.TxFromContext before the claim is made.
	atCommitVariant variant = "inbox-atcommit"
)

var allVariants = []variant{atMostOnce, afterDB, afterDBSync, inboxVariant, batchVariant, batchPgxVariant, partitionedVariant, atCommitVariant}

// usesInbox reports whether the variant's handler runs under the inbox middleware.
func (v variant) usesInbox() bool {
	return v == inboxVariant || v == partitionedVariant || v == atCommitVariant || v.batched()
}

// table is the inbox table the variant's consumers claim in.
func (v variant) table() string {
	if v == partitionedVariant {
		return partitionedTable
	}
	return inboxTable
}

// publisherOptions are how the variant's events get their IDs: UUIDv7 for the partitioned table, Watermill's
// message UUID otherwise.
func (v variant) publisherOptions() []inbox.PublisherOption {
	if v == partitionedVariant {
		return []inbox.PublisherOption{inbox.StampUUIDv7()}
	}
	return nil
}

// batched reports whether the variant runs the inbox in batch mode.
func (v variant) batched() bool { return v == batchVariant || v == batchPgxVariant }

// batchConfig is how a batch variant sets WithBatch and WithBatchConcurrency.
type batchConfig struct {
	Wait        time.Duration // how long a batch waits to fill while others run; 0: it never waits
	Size        int           // most messages per batch
	Concurrency int           // batches of the consumer in flight at once
}

// defaultBatch is what the harness runs batch mode with unless told otherwise: no wait, the largest batches, and
// the library's default concurrency. Batches then grow with the load, as in group commit: a message never waits
// while a slot is free, and the messages that arrive while every slot is taken go together in the next batch.
var defaultBatch = batchConfig{Wait: 0, Size: inbox.MaxBatchSize, Concurrency: inbox.DefaultBatchConcurrency}

// options returns the inbox options of batch mode.
func (b batchConfig) options() []inbox.Option {
	return []inbox.Option{inbox.WithBatch(b.Wait, b.Size), inbox.WithBatchConcurrency(b.Concurrency)}
}

// register adds the batch flags to fs.
func (b *batchConfig) register(fs *flag.FlagSet) {
	fs.DurationVar(&b.Wait, "batch-wait", defaultBatch.Wait, "batch variants: how long a batch waits to fill while others run (WithBatch's maxWait)")
	fs.IntVar(&b.Size, "batch-size", defaultBatch.Size, "batch variants: most messages per batch (WithBatch's maxSize)")
	fs.IntVar(&b.Concurrency, "batch-concurrency", defaultBatch.Concurrency, "batch variants: batches in flight at once (WithBatchConcurrency)")
}

// validate reports a setting WithBatch or WithBatchConcurrency would refuse, before any consumer is started.
func (b batchConfig) validate() error {
	if b.Size < 1 || b.Size > inbox.MaxBatchSize || b.Wait < 0 || b.Concurrency < 1 {
		return fmt.Errorf("--batch-size must be 1 to %d, --batch-wait 0 or more and --batch-concurrency 1 or more (got %d, %s, %d)",
			inbox.MaxBatchSize, b.Size, b.Wait, b.Concurrency)
	}
	return nil
}

// args renders b as command-line flags; the zero value as none, which leaves the consumer's defaults.
func (b batchConfig) args() []string {
	if b == (batchConfig{}) {
		return nil
	}
	return []string{"--batch-wait", b.Wait.String(), "--batch-size", fmt.Sprint(b.Size), "--batch-concurrency", fmt.Sprint(b.Concurrency)}
}

func parseVariant(s string) (variant, error) {
	for _, v := range allVariants {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("unknown variant %q (want one of %v)", s, allVariants)
}
