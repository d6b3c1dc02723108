-- 0016: every failed attempt's error, not only the last: `errors` holds the error records of
-- the job's failed attempts (and lease expiries), oldest first, the last 20 of them
-- (sql/schema/attempt_errors.sql). NULL until an attempt fails after this migration; readers
-- take a NULL beside a last_error as that one error, so nothing is backfilled.
ALTER TABLE {schema}.jobs ADD COLUMN errors jsonb;
