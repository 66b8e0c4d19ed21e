/* store.c — growth that never moves: the tensor and op arrays of a Graph.
 *
 * A Store reserves address space for its maximum element count once
 * (PROT_NONE, no memory behind it) and makes pages readable and writable as
 * elements are added. Elements therefore never move: a Tensor * or Op *
 * taken before graph_add_tensor / graph_add_op stays valid for the life of the
 * graph. Reading past the committed elements faults (the tail stays PROT_NONE),
 * so an index past nt/nops is caught even without a sanitizer.
 *
 * A released store goes back to PROT_NONE and into a small pool that the
 * next reservation of the same size takes from: the budget search makes and
 * frees graphs by the hundred (clones of a prefix), and a pooled store's
 * pages are already there (no zero-fill faults when they are committed
 * again). */
#define _DEFAULT_SOURCE 1     /* MAP_ANONYMOUS, MAP_NORESERVE */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ir.h"

static size_t page_size(void)
{
    static size_t ps;
    if (!ps) {
        long p = sysconf(_SC_PAGESIZE);
        ps = p > 0 ? (size_t)p : 4096;
    }
    return ps;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

enum { POOL = 16 };
static struct { void *base; size_t bytes; } pool[POOL];
static int npool;

void *store_reserve(size_t elem, size_t max)
{
    size_t bytes = round_up(elem * max, page_size());
    for (int i = npool - 1; i >= 0; i--)
        if (pool[i].bytes == bytes) {
            void *p = pool[i].base;
            pool[i] = pool[--npool];
            return p;
        }
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        IR_BUG("cannot reserve %zu bytes of address space", bytes);
    return p;
}

void store_commit(void *base, size_t elem, size_t max, int *committed, int need)
{
    if (need <= *committed)
        return;
    if ((size_t)need > max)
        IR_BUG("store of %zu elements full", max);
    size_t have = round_up(elem * (size_t)*committed, page_size());
    size_t want = round_up(elem * (size_t)need, page_size());
    if (want < have + ((size_t)64 << 10))       /* commit in steps of 64 KiB at least */
        want = have + ((size_t)64 << 10);
    size_t cap = round_up(elem * max, page_size());
    if (want > cap)
        want = cap;
    if (mprotect((char *)base + have, want - have, PROT_READ | PROT_WRITE) != 0)
        IR_BUG("cannot commit %zu bytes", want - have);
    *committed = (int)(want / elem);
}

void store_release(void *base, size_t elem, size_t max, int committed)
{
    if (!base)
        return;
    size_t bytes = round_up(elem * max, page_size()), used = round_up(elem * (size_t)committed, page_size());
    if (npool < POOL && mprotect(base, used < bytes ? used : bytes, PROT_NONE) == 0) {   /* the rest is PROT_NONE */
        pool[npool].base = base;
        pool[npool++].bytes = bytes;
        return;
    }
    munmap(base, bytes);
}
