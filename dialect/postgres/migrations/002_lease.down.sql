ALTER TABLE "watermill_inbox"
    DROP COLUMN IF EXISTS locked_until,
    DROP COLUMN IF EXISTS attempts,
    DROP COLUMN IF EXISTS lease_token,
    DROP COLUMN IF EXISTS last_error;
