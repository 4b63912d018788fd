-- 0013_active_resend: a re-send waiting out its backoff. When a step's
-- deadline passes with attempts left, the re-send is due after the retry
-- backoff; until then the instance waits with resend_pending set and its
-- judged deadline at the end of the backoff. A reply in the meantime moves
-- the instance and nothing is re-sent.
ALTER TABLE steward.instances
    ADD COLUMN resend_pending boolean NOT NULL DEFAULT false;
