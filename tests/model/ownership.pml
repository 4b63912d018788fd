/*
 * ownership.pml - Steward's ownership protocol, as Promela for spin.
 *
 * One instance of an active process, on one partition of its event topic,
 * read by two replicas. The definition it runs:
 *
 *   WORK    (step 1) sends a command (attempt 0, then re-sends); a reply
 *           moves it to NEXT; a lease claim or heartbeat from the worker
 *           holding it runs the lease on; retry.max is RETRY_MAX;
 *           on_timeout -> COMP
 *   NEXT, COMP  (step 2) each sends its own command (the next step's, the
 *           compensation) and waits for events this model leaves out
 *   CLOSED  terminal (an operator's close)
 *
 * The names are the code's. Each proctype stands for:
 *
 *   group       Kafka's consumer group: hands the partition from one replica
 *               to the other (a rebalance), without waiting for the old
 *               owner to notice (a lost assignment, a slow revoke).
 *   intake(me)  one replica's intake (manager/intake/intake_rebalance.c on_assign, on_revoke)
 *               and its batches (manager/intake/batch.c batch_commit): store_claim
 *               bumps steward.offsets.epoch under the row lock; a batch
 *               takes store_fence (offsets row FOR UPDATE, epochs compared),
 *               store_lock_instances (the advisory lock of (process, key)),
 *               judges with engine_apply and writes instance, commands
 *               (cmdq_write: new rows, cmdq_left's cancel) and offsets in
 *               one commit.
 *   scheduler   the due pass (manager/timing/scheduler_due.c judge_batch): the
 *               instance lock only tried (pg_try_advisory_xact_lock), then
 *               engine_judge_due: judge_lease (handed_off) and the deadline
 *               rule (retried, timeout -> on_timeout).
 *   dispatcher  manager/commands/dispatcher.c: claim_sql leases the oldest due row of
 *               the instance, produce_row (rd_kafka_producev), on_delivery
 *               then record (sent_sql). It can crash (at most MAX_CRASHES
 *               times): what it had in flight is lost, and the rows' lease
 *               (next_attempt_at) runs out so they are claimed again.
 *   service     the worker the commands go to: it reads any command produced
 *               so far, in any order, as often as it likes (late,
 *               duplicated, an old token), and answers on the event topic
 *               with a reply or a lease claim/heartbeat carrying the token;
 *               once it answers with a token never issued (a misrouted or
 *               corrupted envelope).
 *   operator    manager/operator/actions_instance.c action_instance: claim, release or close
 *               under lock_instance (the same advisory lock, waited for);
 *               what the claimant did not do is refused to anyone else.
 *
 * Invariants (an assertion each, named by the expression pan prints, and
 * one ltl claim):
 *   acting<=1                  at most one holder (a batch, the due pass, an
 *                              operator action) acts on the instance at a time
 *   applied[pos]==0            an event is judged once: a replica whose
 *                              partition was claimed since is fenced
 *   log_tok[pos]==inst_token   a reply or lease event changes state only
 *                              with the instance's current token
 *   log_tok[pos]>=inst_token   one with an older token, once the instance
 *                              left its step, is stale too: never a page
 *   inst_attempt<=RETRY_MAX    no automatic send past retry.max: a hand-off
 *                              is an attempt
 *   delivered==RETRY_MAX+1     on_timeout only after retry.max + 1 attempts,
 *                              each delivered (sent_at) and none answered
 *   !row_cancelled[r]          nothing is produced once its cancellation
 *                              committed
 *   row_ceid[r]==...           every produce of a row carries its one ce_id,
 *                              and cmdq_add never queues an attempt twice
 *   settled (ltl)              <>[]: every queued row is sent or cancelled
 *                              in the end. Every process is bounded, so each
 *                              run ends; checked without fairness, which is
 *                              stronger than assuming weak fairness.
 *
 * Abstractions: time is not counted. A lease may run out whenever one is
 * held; a step's deadline may pass whenever its latest attempt has been
 * delivered. The retry backoff (resend_pending), the process deadline,
 * parked events, the operator's retry and move, and replies without a
 * token are left out. The bounds (events, rebalances, crashes, operator
 * actions) are -D switches; model_check.sh runs two sets of them.
 *
 * Bug variants (each a -D switch), and the invariant spin must find broken.
 * The first five are today's code where it differs from the protocol
 * above; the others leave out a check the protocol depends on:
 *   BUG_CANCEL_AFTER_CLAIM   claim_sql commits the lease before produce_row,
 *                            so a cancel can commit in between:
 *                            !row_cancelled[r]
 *   BUG_HANDOFF_IGNORES_RETRY_MAX  judge_lease re-sends with no attempt
 *                            left: inst_attempt<=RETRY_MAX
 *   BUG_TOKEN_FROM_BELOW     engine_apply fences only tokens older than the
 *                            instance's, so a higher one is taken:
 *                            log_tok[pos]==inst_token
 *   BUG_STALE_ONLY_IN_STEP   the fence applies only where the state takes
 *                            the event; an old reply after the step was
 *                            left is unexpected and pages:
 *                            log_tok[pos]>=inst_token
 *   BUG_DEADLINE_BEFORE_SENT the deadline runs from the decision, not the
 *                            delivery, so a dispatcher that is down or
 *                            crashed makes a healthy step take on_timeout:
 *                            delivered==RETRY_MAX+1
 *   BUG_NO_FENCE             a batch skips store_fence: applied[pos]==0
 *   BUG_DUE_WITHOUT_LOCK     the due pass does not try the instance lock:
 *                            acting<=1
 *   BUG_CEID_PER_PRODUCE     the id is made at each produce instead of
 *                            stored with the row: row_ceid[r]==...
 *   BUG_CANCELLED_HOLDS_BACK claim_sql lets a cancelled row hold back the
 *                            instance's later ones: settled (an acceptance
 *                            cycle)
 *
 * tests/model_check.sh runs them all; docs/architecture.md, "The ownership
 * protocol, modelled", says what each stands for.
 */

#ifndef RETRY_MAX
#define RETRY_MAX 1
#endif
#ifndef NLOG
#define NLOG 3 /* events on the partition: the start and the service's */
#endif
#define NROWS 4 /* steward.commands rows of the instance */
#ifndef MAX_REBALANCES
#define MAX_REBALANCES 1
#endif
#ifndef MAX_CRASHES
#define MAX_CRASHES 1
#endif
#ifndef MAX_OPS
#define MAX_OPS 2
#endif

/* who holds a lock (0: nobody) */
#define R1 1
#define R2 2
#define SCHED 3
#define OPERATOR 4

/* instance states (steward.instances.state) and events */
#define NONE 0
#define WORK 1
#define COMP 2
#define NEXT 3
#define CLOSED 4
#define TERMINAL(s) ((s) == CLOSED)

#define EV_START 0
#define EV_REPLY 1
#define EV_LEASE 2 /* a lease claim or heartbeat */

/* engine_command_id: the SHA-256 of process, key, step and attempt */
#define CEID(step, attempt) ((step) * 8 + (attempt))

/* ---- the database ---------------------------------------------------- */

/* steward.offsets: one row for the partition */
byte off_epoch = 0;
byte off_next = 0;
byte off_lock = 0; /* SELECT ... FOR UPDATE holder */

/* the event topic's partition */
byte log_kind[NLOG];
byte log_tok[NLOG];
byte log_len = 1; /* log[0] is the start event */
byte applied[NLOG];

/* steward.instances row and the instance's advisory lock */
byte ilock = 0;
byte acting = 0; /* holders inside their critical section */
byte inst_state = NONE;
byte inst_step = 0;
byte inst_attempt = 0;
byte inst_token = 0;
bool inst_leased = false;
byte claimed_by = 0; /* 0: unclaimed; else the operator */

/* steward.commands rows */
byte nrows = 0;
byte row_step[NROWS];
byte row_attempt[NROWS];
byte row_token[NROWS];
bool row_leased[NROWS];    /* next_attempt_at in the future: claimed */
bool row_sent[NROWS];      /* sent_at */
bool row_cancelled[NROWS]; /* cancelled_at */
bool row_flight[NROWS];    /* produced, its delivery report not recorded */
byte row_produced[NROWS];  /* times it reached the command topic */
byte row_ceid[NROWS];      /* the ce_id its first produce carried; 255 none */

/* scratch indexes of the inlines: used only inside atomic blocks that
 * never block, and zeroed after, so they add no states */
byte q = 0;
byte c = 0;
byte d = 0;

/* Kafka's view of who owns the partition */
byte kafka_owner = R1;

/* ---- cmdqueue ----------------------------------------------------------- */

/* cmdq_add + cmdq_write: a row for (step, attempt) with the token. A second
 * row of one attempt would be dropped by ON CONFLICT (ce_id): that an
 * attempt is decided once is the invariant, so it is asserted, not hidden. */
inline cmdq_add(step, attempt, token)
{
    assert(nrows < NROWS); /* the model's bound, not an invariant */
    do
    :: q < nrows -> assert(!(row_step[q] == step && row_attempt[q] == attempt)); q++
    :: else -> break
    od;
    row_step[nrows] = step;
    row_attempt[nrows] = attempt;
    row_token[nrows] = token;
    row_ceid[nrows] = 255;
    nrows++;
    q = 0
}

/* cmdq_left: the unsent rows of steps before the instance's, or all of them
 * once it finished, are cancelled in the transaction that moved it. */
inline cmdq_left()
{
    do
    :: c < nrows ->
        if
        :: !row_sent[c] && !row_cancelled[c] && (row_step[c] < inst_step || TERMINAL(inst_state)) ->
            row_cancelled[c] = true
        :: else -> skip
        fi;
        c++
    :: else -> break
    od;
    c = 0
}

/* ---- the engine ---------------------------------------------------------- */

/* plan_send: the current state's command with the next token */
inline plan_send()
{
    assert(inst_attempt <= RETRY_MAX);
    inst_token++;
    cmdq_add(inst_step, inst_attempt, inst_token)
}

/* enter(): a new step; the lease is over */
inline enter(state)
{
    inst_state = state;
    inst_step++;
    inst_attempt = 0;
    inst_leased = false
}

/* The rows of the current step that were delivered (sent_at set). */
byte delivered;
inline count_delivered()
{
    delivered = 0;
    do
    :: d < nrows -> if :: row_step[d] == inst_step && row_sent[d] -> delivered++ :: else -> skip fi; d++
    :: else -> break
    od;
    d = 0
}

/* The latest row of the step was delivered: its deadline runs. */
#define LATEST_SENT (nrows > 0 && row_step[nrows - 1] == inst_step && row_sent[nrows - 1])

/* engine_apply for the event (kind, tok), with the batch's writes. */
inline engine_apply(kind, tok)
{
    if
    :: inst_state == NONE && kind == EV_START ->
        inst_state = WORK; inst_step = 1; inst_attempt = 0;
        plan_send()
    :: inst_state == NONE && kind != EV_START -> skip /* parked: not reached here */
    :: TERMINAL(inst_state) -> skip                    /* late */
    :: inst_state == WORK && kind == EV_START -> skip  /* unexpected: a second start */
    :: inst_state == WORK && kind != EV_START ->
        if
#ifdef BUG_TOKEN_FROM_BELOW
        :: tok < inst_token -> skip /* stale */
#else
        :: tok != inst_token -> skip /* stale */
#endif
        :: else ->
            assert(tok == inst_token);
            if
            :: kind == EV_REPLY -> enter(NEXT); cmdq_left(); plan_send()
            :: kind == EV_LEASE -> inst_leased = true /* claimed or renewed */
            fi
        fi
    :: (inst_state == NEXT || inst_state == COMP) && kind != EV_START ->
        /* a reply or heartbeat of WORK, a step the instance left */
        if
#ifdef BUG_STALE_ONLY_IN_STEP
        :: true ->
#else
        :: tok == inst_token ->
#endif
            /* judged as an event of this step (here none takes it:
             * unexpected, a sequence alert); an older token never is */
            assert(tok >= inst_token)
        :: else -> skip                /* stale */
        fi
    :: (inst_state == NEXT || inst_state == COMP) && kind == EV_START -> skip
    fi
}

/* ---- the processes -------------------------------------------------------- */

active proctype group()
{
    byte rebalances = 0;
end:
    do
    :: rebalances < MAX_REBALANCES -> kafka_owner = 3 - kafka_owner; rebalances++
    :: else -> break
    od
}

proctype intake(byte me)
{
    byte my_epoch = 0;
    byte pos = 0;
    bool assigned = false;
    bool fenced = false;
end:
    do
    :: !assigned && kafka_owner == me ->
        /* on_assign -> store_claim: blocks on a batch holding the row */
        atomic { off_lock == 0 -> off_epoch++; my_epoch = off_epoch; pos = off_next; assigned = true; fenced = false }
    :: assigned && kafka_owner != me ->
        /* on_revoke (the batch in hand committed first), or lost */
        assigned = false; fenced = false
    :: assigned && !fenced && pos < log_len ->
        /* store_fence: the offsets row FOR UPDATE, epochs compared */
        atomic {
            off_lock == 0 ->
                off_lock = me;
#ifndef BUG_NO_FENCE
                if
                :: off_epoch != my_epoch ->
                    /* fenced: left alone, paused until the group revokes it */
                    off_lock = 0;
                    fenced = true
                :: else -> skip
                fi
#endif
        }
        if
        :: fenced -> skip
        :: else ->
            atomic { ilock == 0 -> ilock = me; acting++ } /* store_lock_instances */
            atomic {
                assert(acting <= 1);
                engine_apply(log_kind[pos], log_tok[pos]);
                assert(applied[pos] == 0);
                applied[pos]++;
                if
                :: off_epoch == my_epoch -> off_next = pos + 1 /* WHERE o.epoch = u.e */
                :: else -> skip
                fi;
                pos++;
                acting--;
                ilock = 0;
                off_lock = 0 /* COMMIT */
            }
        fi
    od
}

/* The due pass: judge_lease, then the deadline rule. Time is abstract: a
 * lease can run out whenever one is held, a deadline pass whenever the
 * step's latest attempt was delivered (its deadline runs from then). */
#ifdef BUG_DEADLINE_BEFORE_SENT
#define DEADLINE_RUNS (nrows > 0)
#else
#define DEADLINE_RUNS LATEST_SENT
#endif

#ifdef BUG_DUE_WITHOUT_LOCK
#define TRY_LOCK(cond) atomic { cond -> acting++ }
#define UNLOCK skip
#else
#define TRY_LOCK(cond) atomic { ilock == 0 && (cond) -> ilock = SCHED; acting++ }
#define UNLOCK ilock = 0
#endif

active proctype scheduler()
{
end:
    do
    :: TRY_LOCK(inst_state == WORK && inst_leased);
        atomic {
            assert(acting <= 1);
            if
            :: inst_state == WORK && inst_leased ->
                /* judge_lease: handed_off with attempts left; with none the
                 * deadline rule decides */
                inst_leased = false;
#ifndef BUG_HANDOFF_IGNORES_RETRY_MAX
                if
                :: inst_attempt < RETRY_MAX ->
#endif
                    inst_attempt++;
                    plan_send()
#ifndef BUG_HANDOFF_IGNORES_RETRY_MAX
                :: else -> skip
                fi
#endif
            :: else -> skip
            fi;
            acting--;
            UNLOCK
        }
    :: TRY_LOCK(inst_state == WORK && DEADLINE_RUNS);
        atomic {
            assert(acting <= 1);
            if
            :: inst_state == WORK && DEADLINE_RUNS ->
                if
                :: inst_attempt < RETRY_MAX ->
                    inst_leased = false;
                    inst_attempt++;
                    plan_send() /* retried */
                :: else ->
                    /* timeout: on_timeout, after RETRY_MAX + 1 attempts
                     * delivered and none answered */
                    count_delivered();
                    assert(inst_attempt == RETRY_MAX && delivered == RETRY_MAX + 1);
                    delivered = 0;
                    enter(COMP);
                    cmdq_left();
                    plan_send()
                fi
            :: else -> skip
            fi;
            acting--;
            UNLOCK
        }
    od
}

/* Row k is the oldest due row of the instance: unsent, not cancelled, not
 * leased, and no earlier row unsent and not cancelled (claim_sql). */
#define SETTLED(k) (row_sent[k] || row_cancelled[k])
#ifdef BUG_CANCELLED_HOLDS_BACK
#define AHEAD(k) row_sent[k]
#else
#define AHEAD(k) SETTLED(k)
#endif
#define CLAIMABLE(k) (k < nrows && !SETTLED(k) && !row_leased[k] && \
    (k < 1 || AHEAD(0)) && (k < 2 || AHEAD(1)) && (k < 3 || AHEAD(2)))

#ifdef BUG_CEID_PER_PRODUCE
#define PRODUCED_ID(r) (CEID(row_step[r], row_attempt[r]) + 64 * row_produced[r])
#else
#define PRODUCED_ID(r) CEID(row_step[r], row_attempt[r])
#endif

/* produce_row: the message reaches the command topic */
inline produce(r)
{
    assert(!row_cancelled[r]);
    if
    :: row_ceid[r] == 255 -> row_ceid[r] = PRODUCED_ID(r)
    :: else -> assert(row_ceid[r] == PRODUCED_ID(r))
    fi;
    row_produced[r]++;
    row_flight[r] = true
}

/* claim_sql leases row k, and produce_row sends it */
#ifdef BUG_CANCEL_AFTER_CLAIM
#define CLAIM(k) \
    :: atomic { CLAIMABLE(k) -> row_leased[k] = true; r = k } \
       /* the claim committed; a cancel may commit before the produce */ \
       atomic { produce(r); r = 0 }
#else
/* claimed and produced under the row lock: a cancel commits before the
 * claim (which then skips the row) or after the produce */
#define CLAIM(k) \
    :: atomic { CLAIMABLE(k) -> row_leased[k] = true; produce(k) }
#endif

/* on_delivery, then record: sent_sql (WHERE sent_at IS NULL) */
#define RECORD(k) \
    :: atomic { row_flight[k] -> row_flight[k] = false; row_sent[k] = true; row_leased[k] = false }

active proctype dispatcher()
{
    byte crashes = 0;
    byte r = 0;
end:
    do
    CLAIM(0)
    CLAIM(1)
    CLAIM(2)
    CLAIM(3)
    RECORD(0)
    RECORD(1)
    RECORD(2)
    RECORD(3)
    :: crashes < MAX_CRASHES ->
        atomic {
            /* a crash: what was in flight is never recorded, and the leases
             * of unsent rows run out */
            crashes++;
            do
            :: r < nrows ->
                row_flight[r] = false;
                if
                :: !row_sent[r] -> row_leased[r] = false
                :: else -> skip
                fi;
                r++
            :: else -> break
            od;
            r = 0
        }
    od
}

/* The service answers row k's command: a reply or a lease claim/heartbeat
 * with its token. */
#define ANSWER(k) \
    :: atomic { log_len < NLOG && k < nrows && row_produced[k] > 0 && row_step[k] == 1 -> \
        if \
        :: log_kind[log_len] = EV_REPLY \
        :: log_kind[log_len] = EV_LEASE \
        fi; \
        log_tok[log_len] = row_token[k]; \
        log_len++ }

active proctype service()
{
    bool forged = false;
end:
    do
    ANSWER(0)
    ANSWER(1)
    ANSWER(2)
    ANSWER(3)
    :: atomic {
        log_len < NLOG && !forged ->
            forged = true;
            log_kind[log_len] = EV_REPLY;
            log_tok[log_len] = inst_token + 1; /* never issued yet */
            log_len++
        }
    od
}

active proctype operator()
{
    byte ops = 0;
    byte actor = 0;
end:
    do
    :: atomic { ops < MAX_OPS && ilock == 0 -> ilock = OPERATOR; acting++; ops++ } /* lock_instance */
        atomic {
            assert(acting <= 1);
            if
            :: actor = 1
            :: actor = 2
            fi;
            if
            :: claimed_by == 0 -> claimed_by = actor    /* claim */
            :: claimed_by == actor -> claimed_by = 0    /* release */
            :: claimed_by == 0 || claimed_by == actor -> /* close */
                if
                :: inst_state != NONE && !TERMINAL(inst_state) ->
                    inst_state = CLOSED;
                    inst_leased = false;
                    cmdq_left()
                :: else -> skip
                fi
            :: claimed_by != 0 && claimed_by != actor -> skip /* refused: claimed by another */
            fi;
            actor = 0;
            acting--;
            ilock = 0
        }
    od
}

init
{
    log_kind[0] = EV_START;
    log_tok[0] = 0;
    if
    :: claimed_by = 0
    :: claimed_by = 1 /* claimed by an operator before the model starts */
    fi;
    atomic {
        run intake(R1);
        run intake(R2)
    }
}

/* Every queued row is eventually sent or cancelled. */
#define ROW_SETTLED(i) (i >= nrows || row_sent[i] || row_cancelled[i])
ltl settled { <>[] (ROW_SETTLED(0) && ROW_SETTLED(1) && ROW_SETTLED(2) && ROW_SETTLED(3)) }
