-- The migration ledger and the schema checks (pgjobs.migrate, Database.schema_state).

-- name: migrate_lock
-- Serialises every migrate of schema $1, whatever process runs it.
SELECT pg_advisory_xact_lock(hashtextextended('pgjobs:migrate:' || $1::text, 0));

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: create_ledger
CREATE TABLE IF NOT EXISTS {schema}.migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied_versions
SELECT version, name FROM {schema}.migrations;

-- name: record_version
INSERT INTO {schema}.migrations (version, name) VALUES ($1, $2);

-- name: recorded_digest
-- The digest of the definitions last applied (the table is created by 0001_baseline).
SELECT digest FROM {schema}.schema_definitions;

-- name: record_digest
INSERT INTO {schema}.schema_definitions (singleton, digest) VALUES (true, $1)
ON CONFLICT (singleton) DO UPDATE SET digest = excluded.digest, applied_at = now();

-- name: ledger_tables
-- Which of the ledger tables exist (a schema never migrated has neither).
SELECT to_regclass('{schema}.migrations') IS NOT NULL AS versions,
       to_regclass('{schema}.schema_definitions') IS NOT NULL AS definitions;

-- name: schema_version
-- The highest applied migration.
SELECT max(version) FROM {schema}.migrations;
