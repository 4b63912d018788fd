/*
 * def_files - definitions read from the file system: one file
 * (def_load_file(): opened without blocking, judged by its descriptor,
 * capped in size) and a set of files and directories (def_set_load()) with
 * its lookups; see def.h.
 */
#include "definitions/def.h"

#include "definitions/def_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* strerror_r's text with a lowercase first letter, as messages print it. */
static const char *errno_text(int errnum, char *buf, size_t size)
{
    char tmp[128];
    /* GNU strerror_r: the text may be in tmp or in a static string. */
    snprintf(buf, size, "%s", strerror_r(errnum, tmp, sizeof tmp));
    if (buf[0] >= 'A' && buf[0] <= 'Z')
        buf[0] = (char) (buf[0] - 'A' + 'a');
    return buf;
}

/* What a file that is not a regular one is, for the message. */
static const char *file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    return "not a regular file";
}

def_t *def_load_file(const char *path, def_problems_t *problems)
{
    char err[128];
    /* Opened without blocking and judged by the descriptor, not the name:
     * a FIFO would block open() or read() for ever, and a stat() before
     * the open could describe another file than the one read. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        def_problems_add(problems, path, "", "%s", errno_text(errno, err, sizeof err));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        def_problems_add(problems, path, "", "%s", errno_text(errno, err, sizeof err));
        close(fd);
        return NULL;
    }
    if (S_ISDIR(sb.st_mode)) {
        def_problems_add(problems, path, "", "is a directory, not a definition file");
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        def_problems_add(problems, path, "",
                         "is %s, not a regular file: a definition is read "
                         "from a regular file",
                         file_kind(sb.st_mode));
        close(fd);
        return NULL;
    }
    if (sb.st_size > FILE_MAX_BYTES) {
        def_problems_add(problems, path, "", "file is %lld bytes: a definition is at most %d bytes",
                         (long long) sb.st_size, FILE_MAX_BYTES);
        close(fd);
        return NULL;
    }

    /* Read up to one byte past the limit, in case the file grew since fstat(). */
    char *text = malloc(FILE_MAX_BYTES + 1);
    size_t len = 0;
    int read_error = 0;
    while (text != NULL && len < FILE_MAX_BYTES + 1) {
        ssize_t got = read(fd, text + len, FILE_MAX_BYTES + 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            read_error = errno;
        if (got <= 0)
            break;
        len += (size_t) got;
    }
    close(fd);

    def_t *def = NULL;
    if (text == NULL)
        def_problems_add(problems, path, "", "out of memory");
    else if (read_error != 0)
        def_problems_add(problems, path, "", "%s", errno_text(read_error, err, sizeof err));
    else if (len > FILE_MAX_BYTES)
        def_problems_add(problems, path, "", "file is over %d bytes: too large for a definition",
                         FILE_MAX_BYTES);
    else
        def = def_load_json(text, len, path, problems);
    free(text);
    return def;
}

/* ---- sets ---- */

typedef struct path_list {
    char **items;
    size_t n, cap;
} path_list_t;

static bool path_list_add(path_list_t *list, char *path)
{
    if (list->n == list->cap) {
        size_t cap = list->cap == 0 ? 16 : list->cap * 2;
        char **items = realloc(list->items, cap * sizeof *items);
        if (items == NULL)
            return false;
        list->items = items;
        list->cap = cap;
    }
    list->items[list->n++] = path;
    return true;
}

static void path_list_clear(path_list_t *list)
{
    for (size_t i = 0; i < list->n; i++)
        free(list->items[i]);
    free(list->items);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *) a, *(char *const *) b);
}

static bool has_json_suffix(const char *name)
{
    size_t len = strlen(name);
    return len > 5 && strcmp(name + len - 5, ".json") == 0;
}

/* Appends dir's *.json files, in name order, to files. False (reported) on failure. */
static bool list_directory(const char *dir, path_list_t *files, def_problems_t *problems)
{
    char err[128];
    DIR *d = opendir(dir);
    if (d == NULL) {
        def_problems_add(problems, dir, "", "%s", errno_text(errno, err, sizeof err));
        return false;
    }
    path_list_t found = {0};
    bool ok = true;
    size_t dir_len = strlen(dir);
    const char *sep = dir_len > 0 && dir[dir_len - 1] == '/' ? "" : "/";
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        /* Hidden files are editor backups and the like, not definitions. */
        if (ent->d_name[0] == '.' || !has_json_suffix(ent->d_name))
            continue;
        char *path = NULL;
        if (asprintf(&path, "%s%s%s", dir, sep, ent->d_name) < 0 || !path_list_add(&found, path)) {
            free(path);
            def_problems_add(problems, dir, "", "out of memory");
            ok = false;
            break;
        }
    }
    closedir(d);

    if (ok && found.n == 0) {
        def_problems_add(problems, dir, "", "no *.json files in this directory");
        ok = false;
    }
    if (found.n > 1)
        qsort(found.items, found.n, sizeof *found.items, compare_strings);
    for (size_t i = 0; ok && i < found.n; i++) {
        if (!path_list_add(files, found.items[i])) {
            def_problems_add(problems, dir, "", "out of memory");
            ok = false;
            break;
        }
        found.items[i] = NULL; /* now owned by files */
    }
    path_list_clear(&found);
    return ok;
}

/* True if `path` names the same file as one already in the set. */
static bool already_loaded(const char *const *real, size_t n, const char *path_real)
{
    return path_real != NULL && def_find_name(real, n, path_real) >= 0;
}

def_set_t *def_set_load(const char *const *paths, size_t n_paths, def_problems_t *problems,
                        size_t *files_read)
{
    char err[128];
    bool ok = true;
    path_list_t files = {0};
    path_list_t real = {0};
    def_set_t *set = calloc(1, sizeof *set);
    if (files_read != NULL)
        *files_read = 0;
    if (set == NULL) {
        def_problems_add(problems, "", "", "out of memory");
        return NULL;
    }

    for (size_t i = 0; i < n_paths; i++) {
        struct stat sb;
        if (stat(paths[i], &sb) != 0) {
            def_problems_add(problems, paths[i], "", "%s", errno_text(errno, err, sizeof err));
            ok = false;
        } else if (S_ISDIR(sb.st_mode)) {
            ok = list_directory(paths[i], &files, problems) && ok;
        } else {
            char *copy = strdup(paths[i]);
            if (copy == NULL || !path_list_add(&files, copy)) {
                free(copy);
                def_problems_add(problems, paths[i], "", "out of memory");
                ok = false;
            }
        }
    }

    for (size_t i = 0; i < files.n; i++) {
        /* The same file named twice (by itself and through its directory)
         * is one definition, not a duplicate. */
        char *path_real = realpath(files.items[i], NULL);
        if (already_loaded((const char *const *) real.items, real.n, path_real)) {
            free(path_real);
            continue;
        }
        if (path_real != NULL && !path_list_add(&real, path_real))
            free(path_real);

        if (files_read != NULL)
            (*files_read)++;
        def_t *def = def_load_file(files.items[i], problems);
        if (def == NULL) {
            ok = false;
            continue;
        }
        const def_t *dup = def_set_find(set, def->process, def->version);
        if (dup != NULL) {
            def_problems_add(problems, def->source, "/version",
                             "process '%s' version %d is already defined in %s: give this one "
                             "a new version",
                             def->process, def->version, dup->source);
            def_free(def);
            ok = false;
            continue;
        }
        def_t **defs = realloc(set->defs, (set->n + 1) * sizeof *defs);
        if (defs == NULL) {
            def_problems_add(problems, def->source, "", "out of memory");
            def_free(def);
            ok = false;
            continue;
        }
        set->defs = defs;
        set->defs[set->n++] = def; /* now owned by set */
    }

    path_list_clear(&files);
    path_list_clear(&real);
    if (!ok) {
        def_set_free(set);
        return NULL;
    }
    return set;
}

void def_set_free(def_set_t *set)
{
    if (set == NULL)
        return;
    for (size_t i = 0; i < set->n; i++)
        def_free(set->defs[i]);
    free(set->defs);
    free(set->topics_prefix);
    json_decref(set->topics_map);
    free(set);
}

const def_t *def_set_latest(const def_set_t *set, const char *process)
{
    const def_t *best = NULL;
    for (size_t i = 0; i < set->n; i++) {
        const def_t *d = set->defs[i];
        if (strcmp(d->process, process) == 0 && (best == NULL || d->version > best->version))
            best = d;
    }
    return best;
}

const def_t *def_set_find(const def_set_t *set, const char *process, int version)
{
    for (size_t i = 0; i < set->n; i++) {
        const def_t *d = set->defs[i];
        if (d->version == version && strcmp(d->process, process) == 0)
            return d;
    }
    return NULL;
}
