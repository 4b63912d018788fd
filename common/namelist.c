/*
 * namelist - comma-separated name lists; see namelist.h.
 */
#include "common/namelist.h"

#include <stdlib.h>
#include <string.h>

bool namelist_walk(const char *list, void (*on_name)(const char *name, void *arg), void *arg,
                   bool *all_out)
{
    bool all = false;
    char *copy = strdup(list != NULL ? list : ""), *save = NULL;
    if (copy == NULL)
        return false;
    for (char *name = strtok_r(copy, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save)) {
        while (*name == ' ' || *name == '\t')
            name++;
        size_t len = strlen(name);
        while (len > 0 && (name[len - 1] == ' ' || name[len - 1] == '\t'))
            name[--len] = '\0';
        if (strcmp(name, "*") == 0)
            all = true;
        else if (len > 0 && on_name != NULL)
            on_name(name, arg);
    }
    free(copy);
    *all_out = all;
    return true;
}

bool namelist_each(const char *list, void (*on_name)(const char *name, void *arg), void *arg)
{
    bool all;
    return !namelist_walk(list, on_name, arg, &all) || all;
}

/* Appends a name to the list being built unless it is there already. */
static void append_new(const char *name, void *arg)
{
    char *out = arg;
    size_t len = strlen(name);
    for (const char *p = out; *p != '\0'; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',')) {
        if (strncmp(p, name, len) == 0 && (p[len] == ',' || p[len] == '\0'))
            return;
    }
    if (*out != '\0')
        strcat(out, ",");
    strcat(out, name);
}

char *namelist_normalize(const char *list)
{
    /* The result is never longer than the input: names only lose blanks,
     * and a separator is only written between two of them. */
    char *out = calloc(1, strlen(list != NULL ? list : "") + 2);
    if (out == NULL)
        return NULL;
    bool all;
    if (!namelist_walk(list, append_new, out, &all)) {
        free(out);
        return NULL;
    }
    if (all)
        strcpy(out, "*");
    return out;
}
