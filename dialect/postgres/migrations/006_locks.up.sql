-- Locks of the inbox's operations, one row per lock (today only "cleanup": one instance cleans the table at a time).
-- A lock is a row, not an advisory lock: a session advisory lock taken through a transaction-pooling proxy such as
-- pgbouncer is taken on one server connection and released on another, so it stays held and later rounds are
-- skipped. A row is taken by a compare-and-set when it is free or its holder's time ran out (by the database clock),
-- extended by its holder as it works, and deleted by the holder when it is done; a holder that died leaves a row
-- that simply runs out.
CREATE TABLE IF NOT EXISTS "watermill_inbox_locks" (
    -- What the lock guards, such as 'cleanup'.
    name       text        PRIMARY KEY,
    -- The holder's token: every later write of the holder names it.
    holder     uuid        NOT NULL,
    -- When the lock is free again unless its holder extends it, by the database clock.
    held_until timestamptz NOT NULL
);
