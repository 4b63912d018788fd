-- 0008_sql_helpers: one definition of what Steward's statements used to
-- spell out each time. All are LANGUAGE sql with a single expression, so
-- the planner inlines them: a comparison with from_ms($1) still uses an
-- index on the column, as the expression it replaces did.

-- The advisory-lock key of one instance. A batch locks its instances with
-- it and parked-event expiry tries it: both must compute the same key or
-- expiry and batches stop excluding each other, so this is the only place
-- it is written. chr(31) (unit separator) cannot occur in a process name,
-- so ('a', 'bc') and ('ab', 'c') get different keys.
CREATE FUNCTION steward.instance_lock_key(process text, key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT hashtextextended(process || chr(31) || key, 0) $$;

-- Epoch milliseconds, Steward's time in C, to and from timestamptz. to_ms
-- rounds to the nearest millisecond. STABLE as extract() on a timestamptz
-- is; IMMUTABLE where the body is.
CREATE FUNCTION steward.to_ms(t timestamptz) RETURNS bigint
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT (extract(epoch FROM t) * 1000)::bigint $$;

CREATE FUNCTION steward.from_ms(ms bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT to_timestamp(ms / 1000.0) $$;

-- A duration in milliseconds, and back.
CREATE FUNCTION steward.to_ms(d interval) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT (extract(epoch FROM d) * 1000)::bigint $$;

CREATE FUNCTION steward.ms_interval(ms bigint) RETURNS interval
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT ms * interval '1 millisecond' $$;

-- RFC 3339 in UTC with milliseconds ("2026-11-29T21:06:03.250Z"), the form
-- common/rfc3339.c writes; NULL for NULL.
CREATE FUNCTION steward.rfc3339(t timestamptz) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') $$;
