DROP TRIGGER IF EXISTS "watermill_inbox_unfinished_claim" ON "watermill_inbox";
CREATE CONSTRAINT TRIGGER "watermill_inbox_unfinished_claim"
    AFTER INSERT ON "watermill_inbox"
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'applying')
    EXECUTE FUNCTION "watermill_inbox_unfinished_claim"();
