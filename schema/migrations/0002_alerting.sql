-- 0002_alerting: what the deadline scheduler needs beyond 0001.

-- The process deadline is judged once, like the state's (overdue).
ALTER TABLE steward.instances ADD COLUMN process_overdue boolean NOT NULL DEFAULT false;

-- Open alerts by kind, for `steward stuck` and the Alertmanager refresh.
CREATE INDEX alerts_open_kind ON steward.alerts (kind, process, state) WHERE resolved_at IS NULL;

-- Notifications of one alert to one sink are delivered in order.
CREATE INDEX outbox_alert ON steward.outbox (alert_id, destination, id)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
