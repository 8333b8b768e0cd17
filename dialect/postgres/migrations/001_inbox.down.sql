DROP TABLE IF EXISTS "watermill_inbox_produced";
DROP TABLE IF EXISTS "watermill_inbox";
