-- A guard for claims made inside a transaction the inbox does not commit (watermill-sql's subscriber transaction).
-- Such a claim is inserted as 'applying' and turned 'done' once the handler succeeded. If the owner of the
-- transaction commits while the row is still 'applying' (watermill-sql v3 commits when its subscriber closes or
-- its ack deadline passes, even with a handler still running), this deferred trigger fails the commit, so a
-- half-run handler's writes are rolled back with the claim instead of being remembered as applied.
-- The WHEN clause keeps rows inserted as 'done' (the transaction mode) from queueing any trigger event.
CREATE OR REPLACE FUNCTION "watermill_inbox_unfinished_claim"() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM "watermill_inbox"
               WHERE consumer = NEW.consumer AND message_id = NEW.message_id AND state = 'applying') THEN
        RAISE EXCEPTION 'inbox: claim %/% would commit before its handler finished', NEW.consumer, NEW.message_id;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS "watermill_inbox_unfinished_claim" ON "watermill_inbox";
CREATE CONSTRAINT TRIGGER "watermill_inbox_unfinished_claim"
    AFTER INSERT ON "watermill_inbox"
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'applying')
    EXECUTE FUNCTION "watermill_inbox_unfinished_claim"();
