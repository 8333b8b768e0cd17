-- Lease mode: a row is 'processing' while a consumer holds its lease, 'released' after a failed attempt,
-- 'done' when the effect landed and 'failed' when the message was dead-lettered after its last attempt.
-- Every column is NULL for rows of the transaction mode, which costs those rows no bytes (001 says why eight
-- columns is the limit).
ALTER TABLE "watermill_inbox"
    -- End of the current holder's lease, by the database clock; NULL once the row leaves 'processing'.
    ADD COLUMN IF NOT EXISTS locked_until timestamptz,
    -- Claims so far, the current one included: 1 on the first attempt.
    ADD COLUMN IF NOT EXISTS attempts     integer,
    -- The current holder's fence: every later write of the holder names it, and a takeover replaces it.
    ADD COLUMN IF NOT EXISTS lease_token  uuid,
    -- Why the last attempt ended without 'done': the handler's error, or an expired lease.
    ADD COLUMN IF NOT EXISTS last_error   text;
