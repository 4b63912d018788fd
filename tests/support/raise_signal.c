/*
 * raise_signal - a library for LD_PRELOAD whose constructor raises the
 * signal $STEWARD_TEST_RAISE names (HUP, TERM or INT): a signal arriving
 * while the libraries initialise, after the loader and before main(),
 * made to happen every time instead of once in a thousand starts.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void raise_named_signal(void)
{
    const char *name = getenv("STEWARD_TEST_RAISE");
    if (name == NULL)
        return;
    int sig = strcmp(name, "HUP") == 0    ? SIGHUP
              : strcmp(name, "TERM") == 0 ? SIGTERM
              : strcmp(name, "INT") == 0  ? SIGINT
                                          : 0;
    if (sig != 0)
        raise(sig);
}
