/* ranks.c — the data side of programs split over ranks (--gpus N > 1).
 *
 * N ranks with B rows each equal one process with N·B rows: global batch i
 * is tokens [i·N·B·T, i·N·B·T + N·B·T + 1) exactly as a one-process program
 * with N·B rows reads it, and rank r takes its rows r·B … (r+1)·B−1, i.e.
 * tokens from r·B·T on. The position advances and wraps by the global batch.
 *
 * zero3 programs keep only this rank's shard of each update slice in their
 * params region; the whole parameters (llm.c's layout: init, checkpoints)
 * are cut into shards on the way in and gathered on the way out.
 */
#include <string.h>

#include "gc_runtime_internal.h"

void gcrt_shard_next_rank(gcrt_shard *s, int32_t *inputs, int32_t *targets, long BT, int rank, int nranks)
{
    long global = BT * nranks;
    const uint16_t *t = s->tok + s->pos + (long)rank * BT;
    for (long i = 0; i < BT; i++) {
        inputs[i] = t[i];
        targets[i] = t[i + 1];
    }
    s->pos += global;
    if (s->pos + global + 1 > s->ntok)
        s->pos = 0;
}

void gcrt_params_to_shards(const gc_program *p, const float *whole, float *shards, int rank, int nranks)
{
    for (int i = 0; i < p->nshards; i++) {
        long first = p->shards[i][0], k = p->shards[i][1] / nranks;
        memcpy(shards + first / nranks, whole + first + (long)rank * k, (size_t)k * sizeof *whole);
    }
}

void gcrt_params_from_shards(const gc_program *p, const float *shards, float *whole, int rank, int nranks)
{
    for (int i = 0; i < p->nshards; i++) {
        long first = p->shards[i][0], k = p->shards[i][1] / nranks;
        memcpy(whole + first + (long)rank * k, shards + first / nranks, (size_t)k * sizeof *whole);
        p->comm->allgather_floats(whole + first, k);
    }
}
