/*
 * fuzz_definition - a definition file: def_load_json() parses and
 * validates it. A definition it returns is whole: every index it holds
 * (start, transitions, timeouts) points inside its arrays, every state is
 * reachable and can finish, and each duration is within
 * DEF_MAX_DURATION_MS, so the engine's deadline sums cannot overflow. A
 * refused one comes with at least one problem, each with a message. Its
 * keys are the Kafka message key or at a valid pointer, and its commands'
 * templates name only variables that exist.
 */
#include "definitions/def.h"
#include "definitions/jsonptr.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    def_problems_t problems = {0};
    def_t *def = def_load_json((const char *) data, size, "fuzz.json", &problems);

    if (def == NULL) {
        FUZZ_CHECK(problems.n > 0, "refused without a problem");
        for (size_t i = 0; i < problems.n; i++)
            FUZZ_CHECK(problems.items[i].message != NULL && problems.items[i].message[0] != '\0',
                       "a problem without a message");
    } else {
        char why[256];
        FUZZ_CHECK(problems.n == 0, "loaded with %zu problems", problems.n);
        FUZZ_CHECK(def->n_events > 0 && def->n_states > 0, "no events or states");
        FUZZ_CHECK(def->start_event < def->n_events && def->start_state < def->n_states,
                   "start out of range");
        FUZZ_CHECK(def->deadline_ms >= 0 && def->deadline_ms <= DEF_MAX_DURATION_MS,
                   "process deadline %lld", (long long) def->deadline_ms);
        FUZZ_CHECK(def->reorder_window_ms >= 0 && def->reorder_window_ms <= DEF_MAX_DURATION_MS,
                   "reorder window %lld", (long long) def->reorder_window_ms);
        /* A key is the Kafka message key or at a valid pointer. */
        FUZZ_CHECK(def->envelope.key_from_message ||
                       jsonptr_valid(def->envelope.key_pointer, why, sizeof why),
                   "key pointer: %s", why);
        FUZZ_CHECK(def->envelope.time_pointer == NULL ||
                       jsonptr_valid(def->envelope.time_pointer, why, sizeof why),
                   "time pointer: %s", why);
        FUZZ_CHECK(def->envelope.type_header == NULL || def->envelope.type_header[0] != '\0',
                   "an empty type header");
        for (size_t e = 0; e < def->n_events; e++) {
            FUZZ_CHECK(def_find_event(def, def->events[e].name) == (long) e, "event %zu lookup", e);
            FUZZ_CHECK(def->events[e].envelope.key_from_message ||
                           jsonptr_valid(def->events[e].envelope.key_pointer, why, sizeof why),
                       "event key pointer: %s", why);
        }
        for (size_t s = 0; s < def->n_states; s++) {
            const def_state_t *st = &def->states[s];
            FUZZ_CHECK(st->deadline_ms >= 0 && st->deadline_ms <= DEF_MAX_DURATION_MS,
                       "state deadline %lld", (long long) st->deadline_ms);
            FUZZ_CHECK(st->on_timeout >= -1 && st->on_timeout < (long) def->n_states,
                       "on_timeout %ld", st->on_timeout);
            for (size_t t = 0; t < st->n_on; t++)
                FUZZ_CHECK(st->on[t].event < def->n_events && st->on[t].to < def->n_states,
                           "transition out of range");
            FUZZ_CHECK(def_find_state(def, st->name) == (long) s, "state %zu lookup", s);
            FUZZ_CHECK(def_state_owner(def, s) != NULL, "state %zu has no owner", s);
            /* A command's template uses only variables that exist (active mode
             * renders it for every instance that enters the state). */
            if (st->command != NULL) {
                def_problems_t tmpl = {0};
                FUZZ_CHECK(
                    def_check_template(st->command->payload, NULL, 0, "fuzz.json", "", &tmpl) == 0,
                    "state %zu's command template has problems", s);
                def_problems_clear(&tmpl);
            }
        }
        def_problems_t graph = {0};
        FUZZ_CHECK(def_check_graph(def, &graph) == 0, "a loaded definition fails its graph check");
        def_problems_clear(&graph);
        def_free(def);
    }
    def_problems_clear(&problems);
    return 0;
}
