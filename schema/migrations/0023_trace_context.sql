-- 0023_trace_context: the W3C traceparent of the event a history row
-- judged ("00-<trace id>-<span id>-<flags>", as its producer sent it in
-- its Kafka header or its CloudEvents extension), so that a page and
-- `steward inspect` lead to the trace of the last thing that happened to
-- an instance. NULL: the event carried none, or a malformed one (ignored).
-- An event parked (out of order) or deferred (its instance locked
-- elsewhere) keeps its traceparent too, for the history row it makes when
-- it is judged.
ALTER TABLE steward.history ADD COLUMN traceparent text;
ALTER TABLE steward.parked ADD COLUMN traceparent text;
ALTER TABLE steward.deferred ADD COLUMN traceparent text;
