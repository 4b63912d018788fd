/*
 * cli_demo - the closing check of `steward demo --active`, apart from the
 * demo itself so that it can be tested without a broker or a database.
 *
 * The *facts* are what the simulator says happened (its ground truth: each
 * order's expected end, every command it received on Kafka, every stale
 * reply it sent) and what Steward recorded (each instance's state, the
 * alerts naming an order, the command outbox, the history rows with
 * outcome `stale`). The check holds when every order ended in the terminal
 * state its faults lead to or was paged at the step that never answered
 * (and no other order was paged), every (order, step, attempt) went out
 * under one ce_id only, the one the contract derives, and every stale
 * reply was recorded as stale.
 *
 * Pure: no I/O. Every string is borrowed from the caller for the call.
 */
#ifndef STEWARD_CLI_DEMO_H
#define STEWARD_CLI_DEMO_H

#include <stdbool.h>
#include <stddef.h>

typedef struct demo_order {
    const char *key;
    const char *terminal; /* the terminal state it should end in, or NULL */
    const char *paged_at; /* the state whose owner should be paged, or NULL */
} demo_order_t;

typedef struct demo_command {
    const char *key;
    long step;
    long attempt;
    const char *ce_id;
} demo_command_t;

typedef struct demo_pair { /* (key, a state) or (key, an event id) */
    const char *key;
    const char *value;
} demo_pair_t;

typedef struct demo_active_facts {
    const char *process;
    const demo_order_t *orders;
    size_t n_orders;
    const demo_command_t *received; /* the simulator's, from the command topics */
    size_t n_received;
    const demo_command_t *outbox; /* steward.commands */
    size_t n_outbox;
    const demo_pair_t *stale_sent; /* (key, event id), from the simulator */
    size_t n_stale_sent;
    const demo_pair_t *stale_recorded; /* (key, event id), history outcome 'stale' */
    size_t n_stale_recorded;
    const demo_pair_t *instances; /* (key, state) */
    size_t n_instances;
    const demo_pair_t *alerts; /* (key, state) of every alert naming an order */
    size_t n_alerts;
} demo_active_facts_t;

#define DEMO_MAX_PROBLEMS 12

typedef struct demo_active_verdict {
    size_t orders, ended_right, paged_right, wrong_end, missed_pages, unexpected_pages;
    size_t commands;        /* distinct (order, step, attempt) seen, either side */
    size_t copies;          /* received more than once under the same id: allowed */
    size_t conflicting_ids; /* (order, step, attempt) under two ids */
    size_t foreign_ids;     /* an id that is not the contract's derivation */
    size_t stale_sent, stale_recorded, stale_missing;
    char problems[DEMO_MAX_PROBLEMS][256]; /* the first problems, for a person */
    size_t n_problems;
} demo_active_verdict_t;

/* Fills *v; true when the check holds (and there was something to check:
 * at least one order and one command). */
bool demo_active_check(const demo_active_facts_t *f, demo_active_verdict_t *v);

#endif
