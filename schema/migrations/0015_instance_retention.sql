-- 0015_instance_retention: what retention.instances removes. A finished
-- instance goes once it entered its terminal state longer ago than the
-- setting (off by default). The index holds finished instances only: an
-- update of an open one adds no entry, and the pass reads the oldest
-- finished ones first without scanning the open.
CREATE INDEX instances_finished ON steward.instances (state_entered_at)
    WHERE status <> 'active';
