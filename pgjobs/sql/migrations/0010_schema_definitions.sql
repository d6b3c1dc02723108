-- 0010: from here on, numbered migrations hold tables, indexes and data changes only. The
-- current definition of every function, trigger function and trigger lives in sql/schema/, one
-- concern per file, and is re-applied by `migrate` whenever its digest differs from the one
-- recorded here (in the same transaction, under the same advisory lock).
CREATE TABLE {schema}.schema_definitions (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    digest     text        NOT NULL,   -- sha256 of the sql/schema/ files, in applying order
    applied_at timestamptz NOT NULL DEFAULT now()
);
