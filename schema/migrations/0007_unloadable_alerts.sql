-- 0007_unloadable_alerts: an alert kind of its own for instances whose
-- recorded definition version no longer loads. They are set aside by the
-- scheduler (instances.suspended); the alert names the version and why.

ALTER TABLE steward.alerts DROP CONSTRAINT alerts_kind_check;
ALTER TABLE steward.alerts ADD CONSTRAINT alerts_kind_check
    CHECK (kind IN ('deadline', 'process_deadline', 'sequence', 'blind', 'unloadable'));
