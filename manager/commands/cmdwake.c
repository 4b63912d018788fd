/*
 * cmdwake - what wakes the dispatcher; see cmdwake.h.
 */
#include "manager/commands/cmdwake.h"

#include "common/db.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct cmdwake {
    int fd[2]; /* a pipe: [0] polled here, [1] written by librdkafka */
    bool listening;
};

/* The channel migration 0022's trigger notifies. */
static const char listen_sql[] = "LISTEN steward_commands";

cmdwake_t *cmdwake_new(char *errstr, size_t errstr_size)
{
    cmdwake_t *w = calloc(1, sizeof *w);
    if (w == NULL) {
        err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
        return NULL;
    }
    if (pipe(w->fd) != 0) {
        err_set(ERR_FATAL, errstr, errstr_size, "the dispatcher's wake-up pipe: %s",
                strerror(errno));
        free(w);
        return NULL;
    }
    for (int i = 0; i < 2; i++)
        fcntl(w->fd[i], F_SETFL, fcntl(w->fd[i], F_GETFL) | O_NONBLOCK);
    return w;
}

void cmdwake_free(cmdwake_t *w)
{
    if (w == NULL)
        return;
    close(w->fd[0]);
    close(w->fd[1]);
    free(w);
}

int cmdwake_fd(const cmdwake_t *w)
{
    return w->fd[1];
}

err_class_t cmdwake_listen(cmdwake_t *w, PGconn *conn, bool *fresh, char *errstr,
                           size_t errstr_size)
{
    *fresh = false;
    if (w->listening)
        return ERR_OK;
    err_class_t cls =
        db_exec(conn, "listening for queued commands", listen_sql, 0, NULL, errstr, errstr_size);
    w->listening = *fresh = cls == ERR_OK;
    return cls;
}

void cmdwake_lost(cmdwake_t *w)
{
    w->listening = false;
}

bool cmdwake_take(cmdwake_t *w, PGconn *conn)
{
    bool any = false;
    /* A connection that broke is found here too; the dispatcher mends it
     * at its next step. */
    if (!w->listening || PQconsumeInput(conn) == 0)
        return false;
    PGnotify *n;
    while ((n = PQnotifies(conn)) != NULL) {
        any = true;
        PQfreemem(n);
    }
    return any;
}

bool cmdwake_wait(cmdwake_t *w, PGconn *conn, int64_t wait_ms)
{
    if (wait_ms <= 0)
        return false;
    struct pollfd fds[2] = {{.fd = w->fd[0], .events = POLLIN},
                            {.fd = w->listening ? PQsocket(conn) : -1, .events = POLLIN}};
    if (poll(fds, 2, wait_ms > 60000 ? 60000 : (int) wait_ms) <= 0)
        return false;
    char drain[64];
    if (fds[0].revents != 0)
        while (read(w->fd[0], drain, sizeof drain) > 0)
            ;
    return fds[1].revents != 0 && cmdwake_take(w, conn);
}
