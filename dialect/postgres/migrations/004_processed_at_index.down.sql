DROP INDEX IF EXISTS "watermill_inbox_processing";
DROP INDEX IF EXISTS "watermill_inbox_processed_at";
