-- The guard of 003 also covers a row turned 'applying' by an UPDATE: a transaction-mode claim joined to
-- watermill-sql's subscriber transaction may take over a row that lease mode left free (released, or with an
-- expired lease), and such a claim must no more commit with a half-run handler than an inserted one.
DROP TRIGGER IF EXISTS "watermill_inbox_unfinished_claim" ON "watermill_inbox";
CREATE CONSTRAINT TRIGGER "watermill_inbox_unfinished_claim"
    AFTER INSERT OR UPDATE OF state ON "watermill_inbox"
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'applying')
    EXECUTE FUNCTION "watermill_inbox_unfinished_claim"();
