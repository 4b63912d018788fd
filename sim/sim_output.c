/*
 * sim_output - the plan's lines, the ground truth and the rewritten
 * definition; see sim_output.h.
 */
#include "sim/sim_output.h"

#include "common/err.h"
#include "definitions/def.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Writes s as a JSON string; bytes that are not printable ASCII (poison's
 * invalid UTF-8 among them) become \u00XX, so every line stays JSON. */
static void json_put_string(FILE *out, const char *s, size_t len)
{
    putc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char) s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20 || c >= 0x7F)
            fprintf(out, "\\u%04x", c);
        else
            putc(c, out);
    }
    putc('"', out);
}

void sim_output_plan_line(FILE *out, const sim_options_t *opts, const sim_def_flow_t *flow,
                          const sim_item_t *item, const sim_kafka_msg_t *o)
{
    char emit[40], time[40], id[80];
    fprintf(out, "{\"emit\":\"%s\",\"time\":\"%s\",\"timestamp\":%" PRId64 ",\"topic\":",
            sim_format_time(item->emit_ms, emit, sizeof emit),
            sim_format_time(o->timestamp_ms, time, sizeof time), o->timestamp_ms);
    json_put_string(out, flow->topic[o->kind], strlen(flow->topic[o->kind]));
    fputs(",\"key\":", out);
    json_put_string(out, o->key, o->key_len);
    if (item->order == NULL) {
        fprintf(out, ",\"poison\":\"%s\"",
                sim_poison_name((sim_poison_t) (item->poison % SIM_N_POISON)));
    } else {
        const sim_msg_t *m = item->msg;
        sim_event_id(opts, item->order->index, m->step, id, sizeof id);
        fprintf(out,
                ",\"type\":\"%s\",\"id\":\"%s\",\"order_id\":\"%s\",\"step\":%u,"
                "\"cloudevent\":%s,\"duplicate\":%s,\"reordered\":%s",
                sim_kind_name((sim_kind_t) m->kind), id, o->key, m->step,
                m->flags & SIM_MSG_CLOUDEVENT ? "true" : "false",
                m->flags & SIM_MSG_DUPLICATE ? "true" : "false",
                m->flags & SIM_MSG_REORDERED ? "true" : "false");
        if (o->n_headers > 0) {
            fputs(",\"headers\":{", out);
            for (size_t i = 0; i < o->n_headers; i++) {
                fputs(i ? "," : "", out);
                json_put_string(out, o->headers[i].name, strlen(o->headers[i].name));
                putc(':', out);
                json_put_string(out, o->headers[i].value, strlen(o->headers[i].value));
            }
            putc('}', out);
        }
    }
    fputs(",\"value\":", out);
    if (o->value == NULL)
        fputs("null", out);
    else
        json_put_string(out, o->value, o->value_len);
    fputs("}\n", out);
}

void sim_output_stall(FILE *out, const sim_options_t *opts, const sim_def_flow_t *flow,
                      const sim_order_t *order)
{
    char id[64], time[40];
    sim_kind_t last = sim_order_last_kind(order);
    sim_order_id(opts, order->index, id, sizeof id);
    fprintf(out,
            "{\"order_id\":\"%s\",\"state\":\"%s\",\"expected\":%s,\"last_event\":\"%s\","
            "\"last_event_time\":\"%s\"}\n",
            id, flow->state_after[last], flow->expected_after[last], sim_kind_name(last),
            sim_format_time(sim_order_last_time(order), time, sizeof time));
}

void sim_output_summary(FILE *out, const sim_options_t *opts, const sim_stats_t *st,
                        bool interrupted)
{
    char start[40];
    fprintf(out,
            "{\"summary\":{\"orders\":%" PRIu64 ",\"events\":%" PRIu64 ",\"stalled\":%" PRIu64
            ",\"declined\":%" PRIu64 ",\"refunded\":%" PRIu64 ",\"completed\":%" PRIu64
            ",\"duplicates\":%" PRIu64 ",\"reordered\":%" PRIu64 ",\"poison\":%" PRIu64
            ",\"cloudevents\":%" PRIu64 ",\"messages\":%" PRIu64 ",\"seed\":%" PRIu64
            ",\"start_time\":\"%s\",\"interrupted\":%s}}\n",
            st->orders, st->events, st->stalled, st->declined, st->refunded, st->completed,
            st->duplicates, st->reordered, st->poison, st->cloudevents, st->messages, opts->seed,
            sim_format_time(opts->start_ms, start, sizeof start), interrupted ? "true" : "false");
}

int sim_output_definition(const sim_args_t *cfg, const char *src)
{
    json_error_t jerr;
    char err[512];
    json_t *doc = json_load_file(src, 0, &jerr);
    if (doc == NULL) {
        fprintf(stderr, "steward-sim: --definition %s: %s (line %d)\n", src, jerr.text, jerr.line);
        return EXIT_USAGE;
    }
    int rc = EXIT_OK;
    char *text = NULL;
    if (sim_def_rewrite(doc, cfg->topic_prefix, cfg->single_topic, cfg->deadline_scale, err,
                        sizeof err) != ERR_OK) {
        fprintf(stderr, "steward-sim: --definition %s: %s\n", src, err);
        rc = EXIT_USAGE;
        goto done;
    }
    text = json_dumps(doc, JSON_INDENT(2));
    if (text == NULL) {
        fprintf(stderr, "steward-sim: out of memory\n");
        rc = EXIT_RUNTIME;
        goto done;
    }

    /* What we write must load: a prefix with a character Kafka refuses
     * would otherwise surface only when Steward starts. */
    def_problems_t problems = {0};
    def_t *check = def_load_json(text, strlen(text), cfg->write_definition, &problems);
    if (check == NULL) {
        for (size_t i = 0; i < problems.n; i++)
            fprintf(stderr, "steward-sim: --write-definition: %s: %s\n", problems.items[i].pointer,
                    problems.items[i].message);
        def_problems_clear(&problems);
        rc = EXIT_USAGE;
        goto done;
    }
    def_free(check);

    FILE *f = fopen(cfg->write_definition, "w");
    if (f == NULL || fputs(text, f) == EOF || fputc('\n', f) == EOF) {
        fprintf(stderr, "steward-sim: --write-definition %s: %s\n", cfg->write_definition,
                strerror(errno));
        rc = EXIT_RUNTIME;
    }
    if (f != NULL && fclose(f) != 0 && rc == EXIT_OK) {
        fprintf(stderr, "steward-sim: --write-definition %s: %s\n", cfg->write_definition,
                strerror(errno));
        rc = EXIT_RUNTIME;
    }

done:
    free(text);
    json_decref(doc);
    return rc;
}
