/* nccl.h — NCCL for the SIMT emulator: the part of NCCL's API that
 * runtime/cuda/comm_nccl.cu calls, over MPI. Device memory is host memory
 * here (cuda_runtime.h) and streams are synchronous, so each collective runs
 * to completion inside the call.
 *
 * Reductions are deterministic and give every rank the same bits: every
 * rank's contribution is gathered, widened to fp32 and summed in rank order
 * (ncclAvg: each contribution times 1/nranks first, as NCCL's PreMulSum does
 * for floating types), then rounded once to the buffer's type (bf16: to
 * nearest even). Real NCCL sums along its ring and rounds bf16 at every hop;
 * with 2 ranks that is the same single rounding of a + b.
 *
 * The datatype decides how many bytes a count covers, as in NCCL: an fp32
 * collective handed bf16 buffers reads and writes twice the bytes, and the
 * tests that compare ranks with one process see it. Only split programs
 * include this (tests/split/bf16_emu.sh builds them with MPI's flags). */
#ifndef GCEMU_NCCL_H
#define GCEMU_NCCL_H

#include <cuda_runtime.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

typedef enum { ncclSuccess = 0, ncclInvalidArgument = 4, ncclInvalidUsage = 5 } ncclResult_t;
/* NCCL's values */
typedef enum { ncclInt32 = 2, ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat = 7, ncclBfloat16 = 9 } ncclDataType_t;
typedef enum { ncclSum = 0, ncclAvg = 4 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
struct gcemu_nccl_comm { MPI_Comm comm; int rank, size; };
typedef gcemu_nccl_comm *ncclComm_t;

inline long gcemu_nccl_calls;   /* collectives so far (a test may print it) */

inline const char *ncclGetErrorString(ncclResult_t r)
{
    return r == ncclSuccess ? "no error" : r == ncclInvalidArgument ? "invalid argument (emulator)" : "invalid usage (emulator)";
}

/* The id names the communicator: the world rank of the rank that made it
 * and how many it had made before. */
inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    static int made;
    int world;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    memset(id, 0, sizeof *id);
    int key[2] = {world, made++};
    memcpy(id->internal, key, sizeof key);
    return ncclSuccess;
}

/* Every world rank makes its communicators at the same collective of the
 * program (comm_nccl.cu makes each group's at its first use), so a split of
 * MPI_COMM_WORLD by the id serves as NCCL's bootstrap. */
inline ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
    int key[2];
    memcpy(key, id.internal, sizeof key);
    gcemu_nccl_comm *c = new gcemu_nccl_comm();
    if (MPI_Comm_split(MPI_COMM_WORLD, key[0] * 64 + key[1], rank, &c->comm) != MPI_SUCCESS)
        return ncclInvalidUsage;
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->size);
    if (c->size != nranks || c->rank != rank) {
        fprintf(stderr, "gcemu nccl: communicator of %d ranks (rank %d), asked for %d (rank %d)\n", c->size, c->rank,
                nranks, rank);
        return ncclInvalidUsage;
    }
    *comm = c;
    return ncclSuccess;
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    MPI_Comm_free(&comm->comm);
    delete comm;
    return ncclSuccess;
}

inline size_t gcemu_nccl_size(ncclDataType_t t) { return t == ncclFloat32 || t == ncclInt32 ? 4 : 2; }

inline float gcemu_nccl_load(const void *p, size_t i, ncclDataType_t t)
{
    if (t == ncclFloat32)
        return ((const float *)p)[i];
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;   /* bf16: fp32's top half */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

inline void gcemu_nccl_store(void *p, size_t i, ncclDataType_t t, float f)
{
    if (t == ncclFloat32) {
        ((float *)p)[i] = f;
        return;
    }
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x00400000u;                            /* NaN stays a (quiet) NaN */
    else
        u += 0x7fffu + ((u >> 16) & 1u);             /* nearest even */
    ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}

inline ncclResult_t gcemu_nccl_check(ncclDataType_t t, ncclRedOp_t op)
{
    if (t != ncclFloat32 && t != ncclBfloat16)
        return ncclInvalidArgument;                  /* what comm_nccl.cu may use, nothing else */
    return op == ncclSum || op == ncclAvg ? ncclSuccess : ncclInvalidArgument;
}

/* every rank's n elements of send, in rank order */
inline std::vector<char> gcemu_nccl_all(const void *send, size_t n, ncclDataType_t t, ncclComm_t c)
{
    size_t b = n * gcemu_nccl_size(t);
    std::vector<char> all(b * (size_t)c->size), mine((const char *)send, (const char *)send + b);
    MPI_Allgather(mine.data(), (int)b, MPI_BYTE, all.data(), (int)b, MPI_BYTE, c->comm);
    gcemu_nccl_calls++;
    return all;
}

/* out[i] = the reduction of element first + i over ranks, i < n */
inline void gcemu_nccl_reduce(void *out, const std::vector<char> &all, size_t per, size_t first, size_t n,
                              ncclDataType_t t, ncclRedOp_t op, int size)
{
    float scale = op == ncclAvg ? 1.0f / (float)size : 1.0f;
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int r = 0; r < size; r++) {
            float x = gcemu_nccl_load(all.data() + (size_t)r * per * gcemu_nccl_size(t), first + i, t);
            s += op == ncclAvg ? x * scale : x;
        }
        gcemu_nccl_store(out, i, t, s);
    }
}

inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                  ncclComm_t c, cudaStream_t)
{
    ncclResult_t r = gcemu_nccl_check(t, op);
    if (r != ncclSuccess)
        return r;
    std::vector<char> all = gcemu_nccl_all(send, count, t, c);
    gcemu_nccl_reduce(recv, all, count, 0, count, t, op, c->size);
    return ncclSuccess;
}

inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t t,
                                      ncclRedOp_t op, ncclComm_t c, cudaStream_t)
{
    ncclResult_t r = gcemu_nccl_check(t, op);
    if (r != ncclSuccess)
        return r;
    size_t per = recvcount * (size_t)c->size;
    std::vector<char> all = gcemu_nccl_all(send, per, t, c);
    gcemu_nccl_reduce(recv, all, per, recvcount * (size_t)c->rank, recvcount, t, op, c->size);
    return ncclSuccess;
}

/* recv[r·n .. r·n + n) = rank r's send; send may be recv + rank·n (in place) */
inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t t, ncclComm_t c,
                                  cudaStream_t)
{
    ncclResult_t r = gcemu_nccl_check(t, ncclSum);
    if (r != ncclSuccess)
        return r;
    std::vector<char> all = gcemu_nccl_all(send, sendcount, t, c);
    memcpy(recv, all.data(), all.size());
    return ncclSuccess;
}

#endif
