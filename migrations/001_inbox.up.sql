-- The inbox: one row per message a consumer has applied, or (in lease mode) is applying.
-- The table name is the default, watermill_inbox; inbox.Migrate substitutes the name given with WithTable.
CREATE TABLE IF NOT EXISTS "watermill_inbox" (
    -- The database's clock, never a consumer's: retention and leases compare against now().
    -- Declared first so that, with 8-byte alignment, no padding follows the tuple header.
    processed_at timestamptz NOT NULL DEFAULT now(),
    -- Which consumer applied the message: by default the Watermill handler's name.
    consumer     text        NOT NULL,
    -- The producer's event ID, never a broker offset: a republished copy gets a new offset, not a new ID.
    message_id   text        NOT NULL,
    -- 'done' for every row the transaction mode writes; lease mode (002_lease) adds the other states.
    state        text        NOT NULL DEFAULT 'done',
    -- Messages the handler produced, kept so a redelivery after a failed publish sends them again.
    -- NULL for handlers that produce nothing, which costs no bytes.
    produced     jsonb,
    PRIMARY KEY (consumer, message_id)
);
