-- 0024_trace_commands: the W3C trace context a command continues, and the
-- tracestate that travels with a traceparent.
--
-- commands.traceparent: "00-<trace id>-<span id>-<flags>", the trace id
-- and flags of the event that entered the command's state (or, for a
-- re-send, hand-off or on_timeout decided by the scheduler, of the trace
-- that state continues: see docs/operations.md "Trace context") with a
-- span id of its own, made when the row was queued. Each row is one
-- attempt, so each attempt is a span of its own; a row sent again after a
-- crash (the same ce_id) carries the same value. NULL: no trace to
-- continue, and the message carries no traceparent header.
-- commands.tracestate: the tracestate of that trace, forwarded unchanged.
ALTER TABLE steward.commands ADD COLUMN traceparent text;
ALTER TABLE steward.commands ADD COLUMN tracestate text;

-- The event's tracestate (validated at the edge; NULL: none, or dropped as
-- malformed), kept beside its traceparent.
ALTER TABLE steward.history ADD COLUMN tracestate text;
ALTER TABLE steward.parked ADD COLUMN tracestate text;
ALTER TABLE steward.deferred ADD COLUMN tracestate text;
