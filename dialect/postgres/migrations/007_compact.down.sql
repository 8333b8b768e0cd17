-- Back to the layout of 001 to 006: the rows move back, with their consumer names and states spelled out.
LOCK TABLE "watermill_inbox" IN ACCESS EXCLUSIVE MODE;
DROP VIEW IF EXISTS "watermill_inbox_view";

DO $migration$
DECLARE
    id_type text := (SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
                     WHERE a.attrelid = '"watermill_inbox"'::regclass AND a.attname = 'message_id' AND NOT a.attisdropped);
BEGIN
    EXECUTE format($ddl$
        CREATE TABLE "watermill_inbox_wide" (
            processed_at timestamptz NOT NULL DEFAULT now(),
            consumer     text        NOT NULL,
            message_id   %1$s        NOT NULL,
            state        text        NOT NULL DEFAULT 'done',
            locked_until timestamptz,
            attempts     integer,
            lease_token  uuid,
            last_error   text,
            CONSTRAINT "watermill_inbox_wide_pkey" PRIMARY KEY (consumer, message_id)
        )$ddl$, id_type);
    EXECUTE format($ddl$
        CREATE TABLE "watermill_inbox_produced_wide" (
            consumer   text  NOT NULL,
            message_id %1$s  NOT NULL,
            produced   jsonb NOT NULL,
            CONSTRAINT "watermill_inbox_produced_wide_pkey" PRIMARY KEY (consumer, message_id),
            FOREIGN KEY (consumer, message_id) REFERENCES "watermill_inbox_wide" ON DELETE CASCADE
        )$ddl$, id_type);
END
$migration$;

INSERT INTO "watermill_inbox_wide" (processed_at, consumer, message_id, state, locked_until, attempts, lease_token, last_error)
SELECT to_timestamp(i.processed_at * 60::bigint), c.name, i.message_id,
       CASE i.state WHEN 'd' THEN 'done' WHEN 'a' THEN 'applying' WHEN 'p' THEN 'processing'
                    WHEN 'r' THEN 'released' WHEN 'f' THEN 'failed' END,
       i.locked_until, i.attempts, i.lease_token, i.last_error
FROM "watermill_inbox" i JOIN "watermill_inbox_consumers" c ON c.id = i.consumer_id;
INSERT INTO "watermill_inbox_produced_wide" (consumer, message_id, produced)
SELECT c.name, p.message_id, p.produced
FROM "watermill_inbox_produced" p JOIN "watermill_inbox_consumers" c ON c.id = p.consumer_id;

DROP TABLE "watermill_inbox_produced";
DROP TABLE "watermill_inbox";
DROP TABLE "watermill_inbox_consumers";
ALTER TABLE "watermill_inbox_wide" RENAME TO "watermill_inbox";
ALTER TABLE "watermill_inbox" RENAME CONSTRAINT "watermill_inbox_wide_pkey" TO "watermill_inbox_pkey";
ALTER TABLE "watermill_inbox_produced_wide" RENAME TO "watermill_inbox_produced";
ALTER TABLE "watermill_inbox_produced" RENAME CONSTRAINT "watermill_inbox_produced_wide_pkey" TO "watermill_inbox_produced_pkey";

CREATE INDEX "watermill_inbox_processed_at" ON "watermill_inbox" (consumer, processed_at) WHERE state <> 'processing';
CREATE INDEX "watermill_inbox_processing" ON "watermill_inbox" (locked_until) WHERE state = 'processing';
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
CREATE CONSTRAINT TRIGGER "watermill_inbox_unfinished_claim"
    AFTER INSERT OR UPDATE OF state ON "watermill_inbox"
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.state = 'applying')
    EXECUTE FUNCTION "watermill_inbox_unfinished_claim"();
