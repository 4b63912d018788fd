#!/bin/sh
# model_check.sh ROOT - checks tests/model/ownership.pml, the model of the
# ownership protocol, with spin (docs/architecture.md, "The ownership
# protocol, modelled").
#
# The protocol as it should be must pass: every assertion and no invalid end
# state (safety), and every queued command eventually sent or cancelled
# (the `settled` ltl claim, with no fairness assumed). Each bug variant (a -D
# switch of the model) must fail, on the assertion that names its
# invariant: that proves the checks are not vacuous.
#
# Two bounds keep each run small: `outbox` has one replica owning the
# partition throughout, with the dispatcher's crash and an operator;
# `fence` hands the partition to the second replica while the first may
# still be reading. Prints, per run, the states stored, the transitions
# and the time. Exits 77 (skipped) when spin is missing (Debian: spin;
# scripts/test installs it).
set -u
root=$1
model=$root/tests/model/ownership.pml
cc=${CC:-cc}

if ! command -v spin >/dev/null 2>&1; then
    echo "model_check: spin is not installed (apt-get install spin): skipped"
    exit 77
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/model_check.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

OUTBOX="-DMAX_REBALANCES=0 -DNLOG=3 -DMAX_OPS=1 -DMAX_CRASHES=1"
FENCE="-DMAX_REBALANCES=1 -DNLOG=3 -DMAX_OPS=0 -DMAX_CRASHES=0"

failures=0
started=$(date +%s)

# verify NAME MODE EXPECT SPIN_FLAGS...
#   MODE safety or liveness; EXPECT "pass", or a piece of the violated
#   assertion (as pan prints it) the run must stop on.
verify() {
    name=$1 mode=$2 expect=$3
    shift 3
    dir=$work/$name
    mkdir -p "$dir"
    cp "$model" "$dir/ownership.pml" # spin -t finds the trail beside it
    if ! (cd "$dir" && spin "$@" -a ownership.pml >spin.log 2>&1); then
        echo "FAIL $name: spin -a refused the model:"
        cat "$dir/spin.log"
        failures=$((failures + 1))
        return
    fi
    case $mode in
    safety) cflags="-DSAFETY -DNOCLAIM" run="-m10000" ;;
    liveness) cflags="" run="-a -m10000" ;;
    esac
    # shellcheck disable=SC2086 # the flags are words
    if ! (cd "$dir" && $cc -O0 -w $cflags -o pan pan.c >cc.log 2>&1); then
        echo "FAIL $name: the verifier does not compile:"
        cat "$dir/cc.log"
        failures=$((failures + 1))
        return
    fi
    # shellcheck disable=SC2086
    (cd "$dir" && ./pan $run >pan.out 2>&1)
    out=$dir/pan.out
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$out" | tail -n 1)
    stored=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | tail -n 1)
    trans=$(sed -n 's/^ *\([0-9.e+]*\) transitions.*/\1/p' "$out" | tail -n 1)
    secs=$(sed -n 's/^pan: elapsed time \([0-9.e+-]*\) .*/\1/p' "$out" | tail -n 1)
    figures="${stored:-?} states stored, ${trans:-?} transitions, ${secs:-?} s"
    violation=$(grep -m 1 -E 'assertion violated|acceptance cycle|invalid end state' "$out")
    if [ -z "$errors" ]; then
        echo "FAIL $name ($mode): pan did not finish:"
        tail -n 20 "$out"
        failures=$((failures + 1))
    elif grep -q 'max search depth too small' "$out"; then
        echo "FAIL $name ($mode): the search was cut at depth 10000 (raise -m)"
        failures=$((failures + 1))
    elif [ "$expect" = pass ]; then
        if [ "$errors" -eq 0 ]; then
            echo "ok   $name ($mode): no violation; $figures"
        else
            echo "FAIL $name ($mode): $violation"
            sed -n '1,20p' "$out"
            (cd "$dir" && spin -t -p -g "$@" ownership.pml 2>&1 | tail -n 60)
            failures=$((failures + 1))
        fi
    elif [ "$errors" -gt 0 ] && printf '%s\n' "$violation" | grep -qF -- "$expect"; then
        echo "ok   $name ($mode): found as expected: ${violation#pan:1: }; $figures"
    else
        echo "FAIL $name ($mode): expected a violation of '$expect', got: ${violation:-none}; $figures"
        failures=$((failures + 1))
    fi
}

# shellcheck disable=SC2086 # the bounds are words
{
    verify outbox safety pass $OUTBOX
    verify fence safety pass $FENCE
    verify settled liveness pass $OUTBOX

    verify cancel_after_claim safety 'row_cancelled' -DBUG_CANCEL_AFTER_CLAIM $OUTBOX
    verify handoff_ignores_retry_max safety 'inst_attempt<=' -DBUG_HANDOFF_IGNORES_RETRY_MAX $OUTBOX
    verify token_from_below safety '==inst_token' -DBUG_TOKEN_FROM_BELOW $OUTBOX
    verify stale_only_in_step safety '>=inst_token' -DBUG_STALE_ONLY_IN_STEP $OUTBOX
    verify deadline_before_sent safety 'delivered==' -DBUG_DEADLINE_BEFORE_SENT $OUTBOX
    verify ceid_per_produce safety 'row_ceid' -DBUG_CEID_PER_PRODUCE $OUTBOX
    verify due_without_lock safety 'acting<=' -DBUG_DUE_WITHOUT_LOCK $OUTBOX
    verify no_fence safety 'applied[pos]==0' -DBUG_NO_FENCE $FENCE
    verify cancelled_holds_back liveness 'acceptance cycle' -DBUG_CANCELLED_HOLDS_BACK $OUTBOX
}

echo "model_check: $((failures)) failure(s), $(($(date +%s) - started)) s in all"
[ "$failures" -eq 0 ]
