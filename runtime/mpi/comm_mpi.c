/* comm_mpi.c — the process group and the collectives of CPU programs split
 * over ranks (gcompile --target cpu --gpus N > 1), on MPI. Built into the
 * program by the driver with mpicc; single-rank programs never link it.
 *
 * Determinism: an all-reduce is a reduce-scatter (each rank reduces one
 * chunk, once) followed by an all-gather of the chunks, so every rank holds
 * the same bits afterwards and replicated parameters never drift apart.
 * Failures: MPI's default handler (errors are fatal) stays; a rank that exits
 * early or dies makes mpirun end the job and name the rank.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gc_runtime.h"

static int g_rank, g_size = 1;
static int *g_counts, *g_displs;   /* per rank, for the current message */

/* Chunk of rank r when n elements are cut into g_size nearly equal parts. */
static void chunks(long n)
{
    long per = (n + g_size - 1) / g_size;
    for (int r = 0; r < g_size; r++) {
        long lo = (long)r * per < n ? (long)r * per : n, hi = lo + per < n ? lo + per : n;
        g_counts[r] = (int)(hi - lo);
        g_displs[r] = (int)lo;
    }
}

void gc_allreduce(float *out, const float *in, long n, int avg)
{
    if (n > 2147483647L) {
        fprintf(stderr, "error: rank %d: all-reduce of %ld elements exceeds MPI's int counts\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (out != in)
        memcpy(out, in, (size_t)n * sizeof *out);
    chunks(n);
    float *mine = out + g_displs[g_rank];
    /* in place: the reduced chunk of this rank lands at out[0..count) */
    MPI_Reduce_scatter(MPI_IN_PLACE, out, g_counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long c = g_counts[g_rank];
    if (mine != out)
        memmove(mine, out, (size_t)c * sizeof *out);
    if (avg)
        for (long i = 0; i < c; i++)
            mine[i] /= (float)g_size;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, g_counts, g_displs, MPI_FLOAT, MPI_COMM_WORLD);
}

static void check_count(const char *what, long n)
{
    if (n > 2147483647L / g_size) {
        fprintf(stderr, "error: rank %d: %s of %ld elements exceeds MPI's int counts\n", g_rank, what, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

void gc_reduce_scatter(float *out, const float *in, long n, int avg)
{
    check_count("reduce-scatter", n);
    MPI_Reduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (avg)
        for (long i = 0; i < n; i++)
            out[i] /= (float)g_size;
}

void gc_allgather(float *whole, const float *part, long n)
{
    check_count("all-gather", n);
    if (part != whole + (long)g_rank * n) {
        fprintf(stderr, "error: rank %d: all-gather part is not this rank's place in the whole\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, whole, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
}

void gc_gather(float *out, const float *in, long n)
{
    check_count("gather", n);
    MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
}

static void comm_allgather_floats(float *whole, long n)
{
    check_count("all-gather", n);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, whole, (int)n, MPI_FLOAT, MPI_COMM_WORLD);
}

static int comm_init(int *rank, int *nranks, char *err, size_t errlen)
{
    int ok = 0;
    MPI_Initialized(&ok);
    if (!ok && MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Init failed");
        return -1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_counts = calloc((size_t)g_size, sizeof *g_counts);
    g_displs = calloc((size_t)g_size, sizeof *g_displs);
    if (!g_counts || !g_displs) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    *rank = g_rank;
    *nranks = g_size;
    return 0;
}

static void comm_finalize(void)
{
    MPI_Finalize();
    free(g_counts);
    free(g_displs);
}

static void comm_sum_doubles(double *x, int n)
{
    MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

static void comm_abort(int status)
{
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
}

const gc_comm gc_comm_group = {comm_init, comm_finalize, comm_sum_doubles, comm_abort, comm_allgather_floats};
