-- Indexes for retention: inbox.Cleanup, inbox.Remembers (the retention alarm and its metric), abandoned leases.
--
-- "watermill_inbox_processed_at" lets the cleanup find a consumer's expired rows, oldest first, and lets the
-- retention alarm read each consumer's oldest row, without scanning the table. It leads with consumer because
-- PostgreSQL 15 has no skip scan: "how far back does each consumer remember" is then one index probe per consumer,
-- cheap enough to run on every metrics scrape, where an index on processed_at alone would have to walk past every
-- older row of the other consumers. The price is the consumer name in each entry, about 16 bytes per row more
-- than (processed_at) alone (docs/storage.md has the measurement). It is partial: 'processing' rows are
-- unfinished messages that the cleanup never deletes, and leaving them out keeps every batch from stepping over
-- the same abandoned leases again.
--
-- "watermill_inbox_processing" holds only the 'processing' rows of lease mode, a handful at any time, so that
-- finding leases abandoned long ago (reported by the cleanup and by stats) does not scan the table either.
-- Rows of the transaction mode are never 'processing' and never enter it.
--
-- inbox.Migrate runs in a transaction, where CREATE INDEX CONCURRENTLY is not allowed, so on a new or small table
-- these are built with a write lock for as long as the build takes. On a large existing inbox, build them first
-- by hand, outside a transaction, without blocking claims; Migrate then finds them and only records the version:
--
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS "watermill_inbox_processed_at"
--       ON "watermill_inbox" (consumer, processed_at) WHERE state <> 'processing';
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS "watermill_inbox_processing"
--       ON "watermill_inbox" (locked_until) WHERE state = 'processing';
--
-- (with your table's name in place of watermill_inbox, and a check that neither build left an INVALID index.)
CREATE INDEX IF NOT EXISTS "watermill_inbox_processed_at"
    ON "watermill_inbox" (consumer, processed_at) WHERE state <> 'processing';
CREATE INDEX IF NOT EXISTS "watermill_inbox_processing"
    ON "watermill_inbox" (locked_until) WHERE state = 'processing';
