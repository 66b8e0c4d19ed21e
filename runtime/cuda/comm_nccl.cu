/* comm_nccl.cu — the process group and the collectives of CUDA programs
 * split over ranks (gcompile --target cuda --gpus N > 1): NCCL on gc_stream,
 * bootstrapped through MPI. One GPU per rank: the rank's index among the
 * ranks of its node picks the device (GC_CUDA_DEVICE, read by
 * gc_device_init). The NCCL communicators are made by comm_ready, which
 * gc_main calls after gc_device_init has chosen the device (before the
 * first step, so that no step pays for them): rank 0 makes the
 * ncclUniqueId, MPI broadcasts it. Under tensor parallel each group
 * (gc_runtime.h, GC_GROUP_*) gets its own communicator the same way, over
 * the MPI communicator of the group. Only split programs link this file. */
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "gc_cuda.h"

static int g_rank, g_size = 1;
/* per group: its MPI communicator and its NCCL one (made at its first use) */
static MPI_Comm g_mpi[GC_NGROUPS];
static ncclComm_t g_nccl[GC_NGROUPS];

#define NCCL_CHECK(call)                                                                         \
    do {                                                                                         \
        ncclResult_t r_ = (call);                                                                \
        if (r_ != ncclSuccess) {                                                                 \
            fprintf(stderr, "error: rank %d: %s:%d: NCCL: %s\n", g_rank, __FILE__, __LINE__,      \
                    ncclGetErrorString(r_));                                                     \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
        }                                                                                        \
    } while (0)

static ncclComm_t comm(int group)
{
    if (group < 0 || group >= GC_NGROUPS || g_mpi[group] == MPI_COMM_NULL) {
        fprintf(stderr, "error: rank %d: a collective over group %d, which this program did not make\n", g_rank, group);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (!g_nccl[group]) {
        int rank, size;
        MPI_Comm_rank(g_mpi[group], &rank);
        MPI_Comm_size(g_mpi[group], &size);
        ncclUniqueId id;
        if (rank == 0)
            NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, g_mpi[group]);
        NCCL_CHECK(ncclCommInitRank(&g_nccl[group], size, id, rank));
    }
    return g_nccl[group];
}

extern "C" void gc_allreduce(float *out, const float *in, long n, int avg, int group)
{
    NCCL_CHECK(ncclAllReduce(in, out, (size_t)n, ncclFloat, avg ? ncclAvg : ncclSum, comm(group), gc_stream));
}

extern "C" void gc_reduce_scatter(float *out, const float *in, long n, int avg, int group)
{
    NCCL_CHECK(ncclReduceScatter(in, out, (size_t)n, ncclFloat, avg ? ncclAvg : ncclSum, comm(group), gc_stream));
}

extern "C" void gc_allgather(float *whole, const float *part, long n, int group)
{
    NCCL_CHECK(ncclAllGather(part, whole, (size_t)n, ncclFloat, comm(group), gc_stream));
}

extern "C" void gc_gather(float *out, const float *in, long n, int group)
{
    NCCL_CHECK(ncclAllGather(in, out, (size_t)n, ncclFloat, comm(group), gc_stream));
}

/* bf16 (--precision bf16): tensor parallel's activations and their gradients,
 * the bf16 weight copies of ZeRO */
extern "C" void gc_allreduce_bf16(gc_bf16 *out, const gc_bf16 *in, long n, int avg, int group)
{
    NCCL_CHECK(ncclAllReduce(in, out, (size_t)n, ncclBfloat16, avg ? ncclAvg : ncclSum, comm(group), gc_stream));
}

extern "C" void gc_reduce_scatter_bf16(gc_bf16 *out, const gc_bf16 *in, long n, int avg, int group)
{
    NCCL_CHECK(ncclReduceScatter(in, out, (size_t)n, ncclBfloat16, avg ? ncclAvg : ncclSum, comm(group), gc_stream));
}

extern "C" void gc_allgather_bf16(gc_bf16 *whole, const gc_bf16 *part, long n, int group)
{
    NCCL_CHECK(ncclAllGather(part, whole, (size_t)n, ncclBfloat16, comm(group), gc_stream));
}

extern "C" void gc_gather_bf16(gc_bf16 *out, const gc_bf16 *in, long n, int group)
{
    NCCL_CHECK(ncclAllGather(in, out, (size_t)n, ncclBfloat16, comm(group), gc_stream));
}

static void comm_allgather_floats(float *whole, long n, int group)
{
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, whole, (int)n, MPI_FLOAT, g_mpi[group]);
}

/* tp groups: ranks [t·tp, t·tp + tp); dp groups: the ranks r with the same r mod tp */
static int comm_make_groups(int tp, char *err, size_t errlen)
{
    if (tp < 1 || g_size % tp) {
        snprintf(err, errlen, "tensor parallel over groups of %d ranks needs a multiple of %d ranks, not %d", tp, tp,
                 g_size);
        return -1;
    }
    if (MPI_Comm_split(MPI_COMM_WORLD, g_rank / tp, g_rank, &g_mpi[GC_GROUP_TP]) != MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, g_rank % tp, g_rank, &g_mpi[GC_GROUP_DP]) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Comm_split failed");
        return -1;
    }
    return 0;
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
    g_mpi[GC_GROUP_ALL] = MPI_COMM_WORLD;
    g_mpi[GC_GROUP_TP] = g_mpi[GC_GROUP_DP] = MPI_COMM_NULL;
    MPI_Comm node;   /* the ranks of this node: the local rank picks the GPU */
    int local = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    char dev[16];
    snprintf(dev, sizeof dev, "%d", local);
    setenv("GC_CUDA_DEVICE", dev, 1);
    *rank = g_rank;
    *nranks = g_size;
    return 0;
}

static void comm_finalize(void)
{
    for (int i = 0; i < GC_NGROUPS; i++) {
        if (g_nccl[i])
            ncclCommDestroy(g_nccl[i]);
        if (i != GC_GROUP_ALL && g_mpi[i] != MPI_COMM_NULL)
            MPI_Comm_free(&g_mpi[i]);
    }
    MPI_Finalize();
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

/* every group's communicator, in the same order on every rank (each
 * ncclCommInitRank is collective over its group) */
static void comm_ready(void)
{
    int n = 0;
    for (int i = 0; i < GC_NGROUPS; i++)
        if (g_mpi[i] != MPI_COMM_NULL)
            n += comm(i) != NULL;
    if (getenv("GC_NCCL_TRACE"))   /* tests/split/bf16_emu.sh: made before the first step */
        printf("nccl: %d communicator%s ready\n", n, n == 1 ? "" : "s");
}

extern "C" const gc_comm gc_comm_group = {comm_init, comm_finalize, comm_sum_doubles, comm_abort,
                                           comm_allgather_floats, comm_make_groups, NULL,   /* no watchdog yet */
                                           comm_ready};
