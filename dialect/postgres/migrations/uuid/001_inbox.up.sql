-- The inbox: one row per message a consumer has applied, or (in lease mode) is applying.
-- This is 001_inbox.up.sql for event IDs stored as uuid (inbox.WithIDType(inbox.IDTypeUUID)): 16 bytes instead of
-- the 37 of a UUID's text, and a smaller index.
-- The table name is the default, watermill_inbox; inbox.Migrate substitutes the name given with WithTable.
CREATE TABLE IF NOT EXISTS "watermill_inbox" (
    -- The database's clock, never a consumer's: retention and leases compare against now().
    -- Declared first so that, with 8-byte alignment, no padding follows the tuple header.
    processed_at timestamptz NOT NULL DEFAULT now(),
    -- Which consumer applied the message: by default the Watermill handler's name.
    consumer     text        NOT NULL,
    -- The producer's event ID, never a broker offset: a republished copy gets a new offset, not a new ID.
    message_id   uuid        NOT NULL,
    -- 'done' for every row the transaction mode commits; lease mode (002_lease) adds the other states.
    state        text        NOT NULL DEFAULT 'done',
    PRIMARY KEY (consumer, message_id)
);
-- With 002's four lease columns the table has eight. Keep it at eight: a row with a NULL carries a null bitmap of
-- one byte per eight columns, and up to eight columns it fits in the spare byte of the 23-byte tuple header; a
-- ninth column would make every row 8 bytes longer, NULL or not.

-- Messages a handler returned, kept so that a redelivery after a failed publish can send them again. Few handlers
-- return messages, so they live beside the inbox rather than in a column of every row; the cascade removes them
-- with their inbox row, whoever deletes it.
CREATE TABLE IF NOT EXISTS "watermill_inbox_produced" (
    consumer     text        NOT NULL,
    message_id   uuid        NOT NULL,
    produced     jsonb       NOT NULL,
    PRIMARY KEY (consumer, message_id),
    FOREIGN KEY (consumer, message_id) REFERENCES "watermill_inbox" ON DELETE CASCADE
);
