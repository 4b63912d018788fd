-- 0020_command_sent_or_cancelled: a command row is sent or cancelled,
-- never both. The dispatcher drops a row cancelled after it was claimed
-- before it is produced; one whose message had already left when it was
-- cancelled is recorded as sent, the cancellation kept in last_error. Rows
-- written before this rule that carry both are recorded the same way.
UPDATE steward.commands
   SET last_error = 'delivered although it was cancelled: ' || cancel_reason,
       cancelled_at = NULL, cancel_reason = NULL
 WHERE sent_at IS NOT NULL AND cancelled_at IS NOT NULL;

ALTER TABLE steward.commands
    ADD CONSTRAINT commands_sent_or_cancelled CHECK (sent_at IS NULL OR cancelled_at IS NULL);
