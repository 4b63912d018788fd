-- 0004_outbox_group: grouped pages (notifier.group_window).
--
-- A sequence trigger sent as part of a grouped page carries the group's
-- dedup key in payload->>'group'. The resolve of each of its alerts finds
-- its trigger by alert and then the rest of the group by that key, so both
-- need an index rather than a scan of the whole outbox. Only grouped rows
-- are indexed.
CREATE INDEX outbox_group ON steward.outbox ((payload->>'group'), destination)
    WHERE payload ? 'group';
CREATE INDEX outbox_group_alert ON steward.outbox (alert_id, destination)
    WHERE payload ? 'group';
