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
 *
 * Also the process group seen from gc_main: join, leave (a failing rank
 * ends the group), the loss averaged over ranks.
 */
#include <stdio.h>
#include <stdlib.h>
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

int gcrt_join_group(gcrt_run *st)
{
    const gc_program *p = st->prog;
    char err[512] = "";
    st->ctx.rank = 0, st->ctx.nranks = 1;
    if (!p->comm)
        return 0;
    if (p->comm->init(&st->ctx.rank, &st->ctx.nranks, err, sizeof err) != 0)
        return gcrt_errorf("%s", err);
    if (st->ctx.rank != 0 && !freopen("/dev/null", "w", stdout))
        return gcrt_errorf("rank %d: cannot silence stdout", st->ctx.rank);
    if (st->ctx.nranks != p->nranks)
        return gcrt_errorf("this program was compiled for %d ranks (--gpus %d, split %s) but runs on %d: "
                           "start it with mpirun -np %d", p->nranks, p->nranks, p->split, st->ctx.nranks, p->nranks);
    return 0;
}

void gcrt_leave_group(gcrt_run *st, int status)
{
    const gc_program *p = st->prog;
    if (!p->comm)
        return;
    if (status != 0)
        p->comm->abort(status);
    p->comm->finalize();
}

float gcrt_mean_loss(gcrt_run *st, float loss)
{
    if (st->ctx.nranks <= 1)
        return loss;
    double sum = loss;
    st->prog->comm->sum_doubles(&sum, 1);
    return (float)(sum / st->ctx.nranks);
}

void gcrt_upload_shards(gcrt_run *st)
{
    const gc_program *p = st->prog;
    long n = p->nparam_elems / st->ctx.nranks;
    float *shards = malloc((size_t)(n ? n : 1) * sizeof *shards);
    if (!shards) {
        fprintf(stderr, "error: out of host memory\n");
        exit(1);
    }
    gcrt_params_to_shards(p, st->params, shards, st->ctx.rank, st->ctx.nranks);
    gc_device_upload(st->ctx.region[GC_REGION_PARAMS], shards, (size_t)n * 4);
    free(shards);
}

int gcrt_download_shards(gcrt_run *st)
{
    const gc_program *p = st->prog;
    long n = p->nparam_elems / st->ctx.nranks;
    float *shards = malloc((size_t)(n ? n : 1) * sizeof *shards);
    if (!shards)
        return gcrt_errorf("out of host memory");
    gc_device_download(shards, st->ctx.region[GC_REGION_PARAMS], (size_t)n * 4);
    gcrt_params_from_shards(p, shards, st->params, st->ctx.rank, st->ctx.nranks);
    free(shards);
    return 0;
}
