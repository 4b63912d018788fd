-- 0009_time_in_state: the engine's time in a state, stored where it is
-- judged, so the report and backtest read one figure instead of each
-- computing its own.

-- For a started or advanced row: when the instance entered to_state, as the
-- engine judged it (an entry never runs back before the previous one, so a
-- reordered event does not shorten or lengthen a stay).
ALTER TABLE steward.history ADD COLUMN entered_at timestamptz;

-- For an advanced row: how long the instance spent in from_state, by the
-- same rule.
ALTER TABLE steward.history ADD COLUMN time_in_state_ms bigint CHECK (time_in_state_ms >= 0);

-- Rows written before this migration have neither: they are not backfilled
-- (the rule lives in the engine, not in SQL). The report reads them as the
-- engine would have judged them in history order (see docs/report.md).
