/* comm_nccl.cu — the process group and the collectives of CUDA programs
 * split over ranks (gcompile --target cuda --gpus N > 1): NCCL on gc_stream,
 * bootstrapped through MPI. One GPU per rank: the rank's index among the
 * ranks of its node picks the device (GC_CUDA_DEVICE, read by
 * gc_device_init). The NCCL communicator is made at the first collective,
 * after gc_device_init has chosen the device: rank 0 makes the
 * ncclUniqueId, MPI broadcasts it. Only split programs link this file. */
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

#include "gc_cuda.h"

static int g_rank, g_size = 1;
static ncclComm_t g_nccl;

#define NCCL_CHECK(call)                                                                         \
    do {                                                                                         \
        ncclResult_t r_ = (call);                                                                \
        if (r_ != ncclSuccess) {                                                                 \
            fprintf(stderr, "error: rank %d: %s:%d: NCCL: %s\n", g_rank, __FILE__, __LINE__,      \
                    ncclGetErrorString(r_));                                                     \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
        }                                                                                        \
    } while (0)

static ncclComm_t comm(void)
{
    if (!g_nccl) {
        ncclUniqueId id;
        if (g_rank == 0)
            NCCL_CHECK(ncclGetUniqueId(&id));
        MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        NCCL_CHECK(ncclCommInitRank(&g_nccl, g_size, id, g_rank));
    }
    return g_nccl;
}

extern "C" void gc_allreduce(float *out, const float *in, long n, int avg)
{
    NCCL_CHECK(ncclAllReduce(in, out, (size_t)n, ncclFloat, avg ? ncclAvg : ncclSum, comm(), gc_stream));
}

extern "C" void gc_reduce_scatter(float *out, const float *in, long n, int avg)
{
    NCCL_CHECK(ncclReduceScatter(in, out, (size_t)n, ncclFloat, avg ? ncclAvg : ncclSum, comm(), gc_stream));
}

extern "C" void gc_allgather(float *whole, const float *part, long n)
{
    NCCL_CHECK(ncclAllGather(part, whole, (size_t)n, ncclFloat, comm(), gc_stream));
}

extern "C" void gc_gather(float *out, const float *in, long n)
{
    NCCL_CHECK(ncclAllGather(in, out, (size_t)n, ncclFloat, comm(), gc_stream));
}

static void comm_allgather_floats(float *whole, long n)
{
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
    if (g_nccl)
        ncclCommDestroy(g_nccl);
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

extern "C" const gc_comm gc_comm_group = {comm_init, comm_finalize, comm_sum_doubles, comm_abort,
                                           comm_allgather_floats, NULL};   /* no watchdog yet */
