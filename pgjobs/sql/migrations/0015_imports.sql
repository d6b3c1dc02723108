-- 0015: the import ledger: which job of another system (source: e.g. 'bullmq:<prefix>:<queue>';
-- source_id: its id there) became which job here, in which state and with which data checksum.
-- Written in the transaction that writes the jobs, so a rerun or a resume after a crash skips
-- exactly what is already imported. No foreign key: the record outlives a job purged later,
-- so that a rerun never brings it back. A ledger kept by the migration tool before this release
-- (<schema>_migration.ledger) is carried over.
CREATE TABLE {schema}.imports (
    source      text        NOT NULL,
    source_id   text        NOT NULL,
    job_id      bigint      NOT NULL,
    state       text        NOT NULL,
    checksum    text        NOT NULL,
    imported_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, source_id)
);

DO $$
BEGIN
    IF to_regclass('{schema}_migration.ledger') IS NOT NULL THEN
        INSERT INTO {schema}.imports (source, source_id, job_id, state, checksum, imported_at)
        SELECT 'bullmq:' || prefix || ':' || queue, job_id, engine_id, state, checksum, migrated_at
        FROM {schema}_migration.ledger
        ON CONFLICT DO NOTHING;
    END IF;
END
$$;
