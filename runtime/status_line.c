/* status_line.c — the one status line a run keeps on a terminal: drawn with
 * "\r" and cleared to the end of the line, so each step rewrites it in
 * place; anything else printed meanwhile clears it first. Apart from
 * progress.c (which draws it) so that gcrt_errorf can clear it without
 * pulling in the device (tools linking flags.c alone, e.g. the fuzzers).
 */
#include <stdio.h>

#include "gc_runtime_internal.h"

static int shown;   /* a status line is on the terminal (stdout is one per process) */

void gcrt_status_draw(const char *line, size_t n)
{
    printf("\r%.*s\033[K", (int)n, line);
    shown = 1;
}

void gcrt_progress_break(void)
{
    if (!shown)
        return;
    fputs("\r\033[K", stdout);
    fflush(stdout);
    shown = 0;
}

int gcrt_status_shown(void) { return shown; }
