DROP TABLE IF EXISTS "watermill_inbox_locks";
