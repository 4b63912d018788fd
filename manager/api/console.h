/*
 * console - the web console's files (the .html, .css and .js files of
 * the console folder), compiled into the binary by console/embed.cmake so it needs no build step,
 * no network and no files beside the binary. http_views.c serves them at / and /console/{name}.
 * Read-only, static data: any thread.
 */
#ifndef STEWARD_CONSOLE_H
#define STEWARD_CONSOLE_H

#include <stddef.h>

typedef struct console_asset {
    const char *name;         /* the file name, e.g. "console.js" */
    const char *content_type; /* by its extension */
    const unsigned char *data;
    size_t size;
} console_asset_t;

extern const console_asset_t console_assets[];
extern const size_t console_n_assets;

#endif
