-- Partition upkeep of steward.history as functions that run with the rights
-- of the schema's owner (SECURITY DEFINER), so the retention pass of
-- `steward run` needs EXECUTE on them and no CREATE, DROP or ownership of
-- its own: the runtime role of docs/operations.md stays DML-only. Each
-- accepts only what retention does (a week partition of steward.history),
-- so EXECUTE grants no other DDL. search_path is pinned, as a SECURITY
-- DEFINER function must, and every name below is schema-qualified.

-- Creates week partition p_name for [p_from, p_to): rows the DEFAULT
-- partition took for that week move into it before it is attached
-- (attaching checks that none are left there). The default partition is
-- locked first, until the caller's transaction ends, so no row for the week
-- lands there in between.
CREATE FUNCTION steward.history_week_create(p_name text, p_from timestamptz, p_to timestamptz)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF p_name !~ '^history_p[0-9]{8}$' OR p_to <= p_from THEN
        RAISE EXCEPTION 'not a history week partition: % [%, %)', p_name, p_from, p_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    LOCK TABLE steward.history_default IN EXCLUSIVE MODE;
    EXECUTE format('CREATE TABLE steward.%I (LIKE steward.history INCLUDING DEFAULTS '
                   'INCLUDING CONSTRAINTS INCLUDING STORAGE)', p_name);
    EXECUTE format('WITH moved AS (DELETE FROM steward.history_default '
                   '  WHERE recorded_at >= $1 AND recorded_at < $2 RETURNING *) '
                   'INSERT INTO steward.%I SELECT * FROM moved', p_name)
        USING p_from, p_to;
    EXECUTE format('ALTER TABLE steward.history ATTACH PARTITION steward.%I '
                   'FOR VALUES FROM (%L) TO (%L)', p_name, p_from, p_to);
END
$$;

-- Drops partition p_name of steward.history; never the DEFAULT partition,
-- never another table.
CREATE FUNCTION steward.history_week_drop(p_name text)
    RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    IF p_name = 'history_default' OR NOT EXISTS (
        SELECT FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'steward.history'::regclass AND c.relname = p_name) THEN
        RAISE EXCEPTION 'not a week partition of steward.history: %', p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    EXECUTE format('DROP TABLE steward.%I', p_name);
END
$$;

REVOKE ALL ON FUNCTION steward.history_week_create(text, timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION steward.history_week_drop(text) FROM PUBLIC;
