-- 0016_history_source_dropped: history_source indexed history by where an
-- event was read (topic, partition, offset). No statement of Steward's
-- looks a row up that way, and every history row, on the table that grows
-- fastest, paid an entry in it. Looking an event up by its offset still
-- works; it scans the weeks it reads.
DROP INDEX steward.history_source;
