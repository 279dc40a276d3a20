-- keychainfs sync: what a server's administrator runs once as a superuser (docs/sync.md).
BEGIN;
DO $$
DECLARE
    installed bigint;
BEGIN
    -- EXECUTE: a plain SELECT would be planned, and fail, while the table does not exist.
    IF to_regclass('kcfs_sync.meta') IS NOT NULL THEN
        EXECUTE 'SELECT max(value) FROM kcfs_sync.meta WHERE key = ''schema_version''' INTO installed;
        IF installed > 1 THEN
            RAISE EXCEPTION 'the kcfs_sync schema is version %, newer than 1', installed
                USING ERRCODE = 'KC002';
        END IF;
    END IF;
END $$;
CREATE SCHEMA IF NOT EXISTS kcfs_sync;
REVOKE ALL ON SCHEMA kcfs_sync FROM PUBLIC;

CREATE TABLE IF NOT EXISTS kcfs_sync.meta (
    key text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO kcfs_sync.meta (key, value) VALUES ('schema_version', 1)
    ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value WHERE kcfs_sync.meta.value < EXCLUDED.value;

-- A group's counter row: `seq` is bumped by each write while the writer holds this row
-- locked (SELECT … FOR UPDATE) until it commits, so the group's writes commit in seq
-- order and the sequence has no gap. A plain SEQUENCE would not do: two writers' values
-- can commit in the other order, and a reader that saw the later one would skip the
-- earlier for ever.
CREATE TABLE IF NOT EXISTS kcfs_sync.groups (
    group_id bytea PRIMARY KEY CHECK (length(group_id) = 16),
    owner name NOT NULL DEFAULT current_user,
    seq bigint NOT NULL DEFAULT 0,
    purged_through bigint NOT NULL DEFAULT 0,
    created timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS kcfs_sync.records (
    group_id bytea NOT NULL REFERENCES kcfs_sync.groups (group_id) ON DELETE CASCADE,
    record_id bytea NOT NULL CHECK (length(record_id) = 32),
    version bigint NOT NULL,
    seq bigint NOT NULL,
    deleted boolean NOT NULL,
    blob bytea NOT NULL,
    updated timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, record_id)
);
-- A pull reads a group's records in seq order after a cursor.
CREATE UNIQUE INDEX IF NOT EXISTS records_group_seq ON kcfs_sync.records (group_id, seq);

CREATE TABLE IF NOT EXISTS kcfs_sync.devices (
    group_id bytea NOT NULL REFERENCES kcfs_sync.groups (group_id) ON DELETE CASCADE,
    device bytea NOT NULL CHECK (length(device) BETWEEN 1 AND 64),
    last_seen timestamptz NOT NULL DEFAULT now(),
    cursor_seq bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, device)
);

-- Pairing: an offer under a random id, answered once, a payload delivered and taken once.
CREATE TABLE IF NOT EXISTS kcfs_sync.rendezvous (
    id bytea PRIMARY KEY CHECK (length(id) = 32),
    owner name NOT NULL DEFAULT current_user,
    offer bytea NOT NULL,
    answer bytea,
    payload bytea,
    taken boolean NOT NULL DEFAULT false,
    expires timestamptz NOT NULL
);

-- Row-level security: a role sees and writes only the groups it owns, their records and
-- devices, and its own rendezvous rows. (A table's owner and superusers bypass it: the
-- single-user setup, where the device's role made the tables.)
ALTER TABLE kcfs_sync.meta ENABLE ROW LEVEL SECURITY;
ALTER TABLE kcfs_sync.groups ENABLE ROW LEVEL SECURITY;
ALTER TABLE kcfs_sync.records ENABLE ROW LEVEL SECURITY;
ALTER TABLE kcfs_sync.devices ENABLE ROW LEVEL SECURITY;
ALTER TABLE kcfs_sync.rendezvous ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS read_meta ON kcfs_sync.meta;
CREATE POLICY read_meta ON kcfs_sync.meta FOR SELECT USING (true);
DROP POLICY IF EXISTS own_groups ON kcfs_sync.groups;
CREATE POLICY own_groups ON kcfs_sync.groups
    USING (owner = current_user) WITH CHECK (owner = current_user);
DROP POLICY IF EXISTS own_records ON kcfs_sync.records;
CREATE POLICY own_records ON kcfs_sync.records
    USING (EXISTS (SELECT 1 FROM kcfs_sync.groups g
                   WHERE g.group_id = records.group_id AND g.owner = current_user))
    WITH CHECK (EXISTS (SELECT 1 FROM kcfs_sync.groups g
                        WHERE g.group_id = records.group_id AND g.owner = current_user));
DROP POLICY IF EXISTS own_devices ON kcfs_sync.devices;
CREATE POLICY own_devices ON kcfs_sync.devices
    USING (EXISTS (SELECT 1 FROM kcfs_sync.groups g
                   WHERE g.group_id = devices.group_id AND g.owner = current_user))
    WITH CHECK (EXISTS (SELECT 1 FROM kcfs_sync.groups g
                        WHERE g.group_id = devices.group_id AND g.owner = current_user));
DROP POLICY IF EXISTS own_rendezvous ON kcfs_sync.rendezvous;
CREATE POLICY own_rendezvous ON kcfs_sync.rendezvous
    USING (owner = current_user) WITH CHECK (owner = current_user);

-- One record of a push (the caller holds the group's row locked for the whole batch;
-- locking it again here is free and keeps the function safe to call alone). Outcome 0
-- stored at out_seq, 1 already stored at out_seq, 2 conflict with current_version.
-- SECURITY INVOKER: it runs under the caller's row-level security.
CREATE OR REPLACE FUNCTION kcfs_sync.push_one(
    p_group bytea, p_record bytea, p_expected bigint, p_version bigint, p_deleted boolean,
    p_blob bytea, OUT outcome integer, OUT out_seq bigint, OUT current_version bigint)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    cur_version bigint;
    cur_seq bigint;
    cur_same boolean;
BEGIN
    PERFORM 1 FROM kcfs_sync.groups WHERE group_id = p_group FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown sync group' USING ERRCODE = 'KC001';
    END IF;
    SELECT r.version, r.seq, (r.blob = p_blob AND r.deleted = p_deleted)
        INTO cur_version, cur_seq, cur_same
        FROM kcfs_sync.records r WHERE r.group_id = p_group AND r.record_id = p_record;
    IF FOUND AND cur_version = p_version AND cur_same THEN
        outcome := 1; out_seq := cur_seq; current_version := cur_version;
        RETURN;
    END IF;
    IF coalesce(cur_version, 0) <> p_expected THEN
        outcome := 2; out_seq := 0; current_version := coalesce(cur_version, 0);
        RETURN;
    END IF;
    UPDATE kcfs_sync.groups SET seq = seq + 1 WHERE group_id = p_group RETURNING seq INTO out_seq;
    INSERT INTO kcfs_sync.records AS r (group_id, record_id, version, seq, deleted, blob, updated)
        VALUES (p_group, p_record, p_version, out_seq, p_deleted, p_blob, now())
        ON CONFLICT (group_id, record_id) DO UPDATE
        SET version = EXCLUDED.version, seq = EXCLUDED.seq, deleted = EXCLUDED.deleted,
            blob = EXCLUDED.blob, updated = EXCLUDED.updated;
    outcome := 0; current_version := p_version;
END
$fn$;
REVOKE ALL ON FUNCTION kcfs_sync.push_one(bytea, bytea, bigint, bigint, boolean, bytea) FROM PUBLIC;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'kcfs_sync_device') THEN
        CREATE ROLE kcfs_sync_device NOLOGIN;
    END IF;
END $$;
GRANT USAGE ON SCHEMA kcfs_sync TO kcfs_sync_device;
GRANT SELECT ON kcfs_sync.meta TO kcfs_sync_device;
GRANT SELECT, DELETE ON kcfs_sync.groups TO kcfs_sync_device;
GRANT INSERT (group_id), UPDATE (seq, purged_through) ON kcfs_sync.groups TO kcfs_sync_device;
GRANT SELECT, INSERT, UPDATE, DELETE ON kcfs_sync.records TO kcfs_sync_device;
GRANT SELECT, INSERT, UPDATE, DELETE ON kcfs_sync.devices TO kcfs_sync_device;
GRANT SELECT, DELETE ON kcfs_sync.rendezvous TO kcfs_sync_device;
GRANT INSERT (id, offer, expires), UPDATE (offer, answer, payload, taken) ON kcfs_sync.rendezvous
    TO kcfs_sync_device;
GRANT EXECUTE ON FUNCTION kcfs_sync.push_one(bytea, bytea, bigint, bigint, boolean, bytea)
    TO kcfs_sync_device;
COMMIT;
