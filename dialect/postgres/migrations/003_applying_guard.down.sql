DROP TRIGGER IF EXISTS "watermill_inbox_unfinished_claim" ON "watermill_inbox";
DROP FUNCTION IF EXISTS "watermill_inbox_unfinished_claim"();
