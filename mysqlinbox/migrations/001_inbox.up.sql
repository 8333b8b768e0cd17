-- The inbox on MySQL 8 and MariaDB 10.11: the same rows and states as PostgreSQL's, in one migration, since
-- neither database can undo DDL: every statement here is safe to run again after a failure half-way.
-- The table name is the default, watermill_inbox; mysqlinbox's Migrate substitutes the name given with WithTable.
--
-- consumer and message_id are VARBINARY, so IDs compare byte for byte (case-sensitive, no trailing-space or
-- accent folding), as PostgreSQL's text does. Their lengths are the inbox's limits: 512 bytes of consumer name
-- (MaxConsumerLength) and 2000 bytes of ID (the most WithMaxIDLength allows); the primary key, 2512 bytes, fits
-- InnoDB's 3072-byte limit for a key (the DYNAMIC row format, the default of both databases).
-- Times are DATETIME(6) in UTC: every statement writes and compares UTC_TIMESTAMP(6), the database's clock, never
-- a consumer's, and never the session's time zone.
CREATE TABLE IF NOT EXISTS `watermill_inbox` (
    processed_at DATETIME(6)    NOT NULL,
    consumer     VARBINARY(512) NOT NULL,
    message_id   VARBINARY(2000) NOT NULL,
    -- 'done' in transaction mode; lease mode adds 'processing', 'released' and 'failed'.
    state        VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'done',
    -- Lease mode only, NULL in transaction mode: the end of the holder's lease, claims so far, the holder's
    -- fence, and why the last attempt ended without 'done'.
    locked_until DATETIME(6)    NULL,
    attempts     INT            NULL,
    lease_token  CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
    last_error   TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    PRIMARY KEY (consumer, message_id),
    -- The cleanup's batches and each consumer's oldest row, walking one consumer's rows oldest first.
    KEY `watermill_inbox_processed_at` (consumer, processed_at),
    -- Abandoned leases, without a scan: 'processing' rows are few.
    KEY `watermill_inbox_processing` (state, locked_until)
) ENGINE = InnoDB;

-- Messages a handler returned, kept so that a redelivery after a failed publish can send them again; the cascade
-- removes them with their inbox row.
CREATE TABLE IF NOT EXISTS `watermill_inbox_produced` (
    consumer     VARBINARY(512) NOT NULL,
    message_id   VARBINARY(2000) NOT NULL,
    produced     LONGBLOB       NOT NULL,
    PRIMARY KEY (consumer, message_id),
    CONSTRAINT `watermill_inbox_produced_row` FOREIGN KEY (consumer, message_id)
        REFERENCES `watermill_inbox` (consumer, message_id) ON DELETE CASCADE
) ENGINE = InnoDB;

-- Named locks held for a time by the database clock: the cleanup's, one cleaner of the table at a time.
CREATE TABLE IF NOT EXISTS `watermill_inbox_locks` (
    name         VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    holder       CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    held_until   DATETIME(6)    NOT NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;
