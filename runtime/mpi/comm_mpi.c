/* comm_mpi.c — the process group and the collectives of CPU programs split
 * over ranks (gcompile --target cpu --gpus N > 1), on MPI. Built into the
 * program by the driver with mpicc; single-rank programs never link it.
 *
 * Determinism: an all-reduce is a reduce-scatter (each rank reduces one
 * chunk, once) followed by an all-gather of the chunks, so every rank holds
 * the same bits afterwards and replicated parameters never drift apart.
 * Failures: MPI's default handler (errors are fatal) stays; a rank that exits
 * early or dies makes mpirun end the job and name the rank. A rank that
 * neither dies nor answers (stopped, stuck) is caught by the watchdog: a
 * thread that ends this rank with an error when one collective has not
 * completed within --comm-timeout seconds, naming the ranks on this node
 * that are gone or stopped (pids and hosts are exchanged when the group
 * forms); mpirun then ends the others.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gc_runtime.h"

static int g_rank, g_size = 1;    /* in MPI_COMM_WORLD */
static int *g_counts, *g_displs;   /* per rank, for the current message */

/* the groups the collectives run over (gc_runtime.h, GC_GROUP_*): all ranks,
 * and under tensor parallel the tp and dp groups (comm_make_groups) */
typedef struct { MPI_Comm comm; int rank, size; } Group;
static Group g_group[GC_NGROUPS];

static const Group *group_of(int group)
{
    if (group < 0 || group >= GC_NGROUPS || !g_group[group].size) {
        fprintf(stderr, "error: rank %d: a collective over group %d, which this program did not make\n", g_rank, group);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return &g_group[group];
}

/* ---------------------------------------------------------------- the watchdog */

enum { HOSTLEN = 64 };
static int *g_pids;                       /* per rank */
static char (*g_hosts)[HOSTLEN];          /* per rank */
static double g_timeout;                  /* seconds; 0: no watchdog */
static atomic_llong g_since_ms;           /* when the collective in flight began; 0: none */
static atomic_int g_what, g_watching;
static pthread_t g_watch_thread;
static const char *const what_names[] = {"", "an all-reduce", "a reduce-scatter", "an all-gather", "a gather",
                                         "a sum over ranks", "the group's exit (MPI_Finalize)"};
enum { W_NONE, W_ALLREDUCE, W_REDUCE_SCATTER, W_ALLGATHER, W_GATHER, W_SUM, W_FINALIZE };

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void enter(int what)
{
    atomic_store(&g_what, what);
    atomic_store(&g_since_ms, now_ms());
}

static void leave(void) { atomic_store(&g_since_ms, 0); }

/* "stopped", "gone" or NULL (running) for a process of this node */
static const char *peer_state(int pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return "gone";
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *e = strrchr(buf, ')');   /* "pid (comm) S ..." */
    if (!e || e[1] != ' ')
        return NULL;
    return e[2] == 'T' || e[2] == 't' ? "stopped" : e[2] == 'Z' || e[2] == 'X' ? "gone" : NULL;
}

/* The error line of a collective that timed out, then this rank ends. */
static void timed_out(double waited)
{
    char names[1024] = "";
    size_t len = 0;
    int other_hosts = 0;
    for (int r = 0; r < g_size; r++) {
        if (r == g_rank)
            continue;
        if (strcmp(g_hosts[r], g_hosts[g_rank])) {
            other_hosts++;
            continue;
        }
        const char *st = peer_state(g_pids[r]);
        if (st && len < sizeof names - 80)
            len += (size_t)snprintf(names + len, sizeof names - len, "%srank %d (pid %d on %s) is %s",
                                    len ? ", " : "", r, g_pids[r], g_hosts[r], st);
    }
    fprintf(stderr, "error: rank %d: %s has not completed after %.0f s (--comm-timeout %g): %s%s; ending rank %d\n",
            g_rank, what_names[atomic_load(&g_what)], waited, g_timeout,
            len ? names : "no rank on this node is gone or stopped",
            other_hosts ? " (ranks on other nodes not checked)" : "", g_rank);
    fflush(stderr);
    _exit(1);
}

static void *watch_main(void *arg)
{
    (void)arg;
    struct timespec tick = {0, 200 * 1000000L};
    while (atomic_load(&g_watching)) {
        nanosleep(&tick, NULL);
        long long since = atomic_load(&g_since_ms);
        if (since && (double)(now_ms() - since) / 1e3 >= g_timeout)
            timed_out((double)(now_ms() - since) / 1e3);
    }
    return NULL;
}

static void comm_watch(double timeout_s)
{
    if (timeout_s <= 0 || atomic_load(&g_watching))
        return;
    g_timeout = timeout_s;
    atomic_store(&g_watching, 1);
    if (pthread_create(&g_watch_thread, NULL, watch_main, NULL) != 0) {
        atomic_store(&g_watching, 0);
        fprintf(stderr, "warning: rank %d: no watchdog thread: --comm-timeout is off\n", g_rank);
    }
}

/* Chunk of rank r when n elements are cut into `size` nearly equal parts. */
static void chunks(long n, int size)
{
    long per = (n + size - 1) / size;
    for (int r = 0; r < size; r++) {
        long lo = (long)r * per < n ? (long)r * per : n, hi = lo + per < n ? lo + per : n;
        g_counts[r] = (int)(hi - lo);
        g_displs[r] = (int)lo;
    }
}

void gc_allreduce(float *out, const float *in, long n, int avg, int group)
{
    const Group *G = group_of(group);
    if (n > 2147483647L) {
        fprintf(stderr, "error: rank %d: all-reduce of %ld elements exceeds MPI's int counts\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (out != in)
        memcpy(out, in, (size_t)n * sizeof *out);
    enter(W_ALLREDUCE);
    chunks(n, G->size);
    float *mine = out + g_displs[G->rank];
    /* in place: the reduced chunk of this rank lands at out[0..count) */
    MPI_Reduce_scatter(MPI_IN_PLACE, out, g_counts, MPI_FLOAT, MPI_SUM, G->comm);
    long c = g_counts[G->rank];
    if (mine != out)
        memmove(mine, out, (size_t)c * sizeof *out);
    if (avg)
        for (long i = 0; i < c; i++)
            mine[i] /= (float)G->size;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, g_counts, g_displs, MPI_FLOAT, G->comm);
    leave();
}

static void check_count(const char *what, long n, const Group *G)
{
    if (n > 2147483647L / G->size) {
        fprintf(stderr, "error: rank %d: %s of %ld elements exceeds MPI's int counts\n", g_rank, what, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

void gc_reduce_scatter(float *out, const float *in, long n, int avg, int group)
{
    const Group *G = group_of(group);
    check_count("reduce-scatter", n, G);
    enter(W_REDUCE_SCATTER);
    MPI_Reduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, G->comm);
    leave();
    if (avg)
        for (long i = 0; i < n; i++)
            out[i] /= (float)G->size;
}

void gc_allgather(float *whole, const float *part, long n, int group)
{
    const Group *G = group_of(group);
    check_count("all-gather", n, G);
    if (part != whole + (long)G->rank * n) {
        fprintf(stderr, "error: rank %d: all-gather part is not this rank's place in the whole\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    enter(W_ALLGATHER);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, whole, (int)n, MPI_FLOAT, G->comm);
    leave();
}

void gc_gather(float *out, const float *in, long n, int group)
{
    const Group *G = group_of(group);
    check_count("gather", n, G);
    enter(W_GATHER);
    MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, G->comm);
    leave();
}

static void comm_allgather_floats(float *whole, long n, int group)
{
    const Group *G = group_of(group);
    check_count("all-gather", n, G);
    enter(W_ALLGATHER);
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, whole, (int)n, MPI_FLOAT, G->comm);
    leave();
}

/* tp groups: ranks [t·tp, t·tp + tp); dp groups: the ranks r with the same r mod tp */
static int comm_make_groups(int tp, char *err, size_t errlen)
{
    if (tp < 1 || g_size % tp) {
        snprintf(err, errlen, "tensor parallel over groups of %d ranks needs a multiple of %d ranks, not %d", tp, tp,
                 g_size);
        return -1;
    }
    Group *T = &g_group[GC_GROUP_TP], *D = &g_group[GC_GROUP_DP];
    if (MPI_Comm_split(MPI_COMM_WORLD, g_rank / tp, g_rank, &T->comm) != MPI_SUCCESS ||
        MPI_Comm_split(MPI_COMM_WORLD, g_rank % tp, g_rank, &D->comm) != MPI_SUCCESS) {
        snprintf(err, errlen, "MPI_Comm_split failed");
        return -1;
    }
    MPI_Comm_rank(T->comm, &T->rank);
    MPI_Comm_size(T->comm, &T->size);
    MPI_Comm_rank(D->comm, &D->rank);
    MPI_Comm_size(D->comm, &D->size);
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
    g_group[GC_GROUP_ALL] = (Group){MPI_COMM_WORLD, g_rank, g_size};
    g_counts = calloc((size_t)g_size, sizeof *g_counts);
    g_displs = calloc((size_t)g_size, sizeof *g_displs);
    g_pids = calloc((size_t)g_size, sizeof *g_pids);
    g_hosts = calloc((size_t)g_size, sizeof *g_hosts);
    if (!g_counts || !g_displs || !g_pids || !g_hosts) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    char host[HOSTLEN] = "";   /* for the watchdog's message: who runs where */
    if (gethostname(host, sizeof host - 1) != 0)
        snprintf(host, sizeof host, "?");
    int pid = (int)getpid();
    MPI_Allgather(&pid, 1, MPI_INT, g_pids, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgather(host, HOSTLEN, MPI_CHAR, g_hosts, HOSTLEN, MPI_CHAR, MPI_COMM_WORLD);
    *rank = g_rank;
    *nranks = g_size;
    return 0;
}

static void comm_finalize(void)
{
    enter(W_FINALIZE);
    for (int i = GC_GROUP_TP; i < GC_NGROUPS; i++)
        if (g_group[i].size)
            MPI_Comm_free(&g_group[i].comm);
    MPI_Finalize();
    leave();
    if (atomic_load(&g_watching)) {
        atomic_store(&g_watching, 0);
        pthread_join(g_watch_thread, NULL);
    }
    free(g_counts);
    free(g_displs);
    free(g_pids);
    free(g_hosts);
}

static void comm_sum_doubles(double *x, int n)
{
    enter(W_SUM);
    MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    leave();
}

static void comm_abort(int status)
{
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, status);
}

const gc_comm gc_comm_group = {comm_init, comm_finalize, comm_sum_doubles, comm_abort, comm_allgather_floats,
                               comm_make_groups, comm_watch, NULL};
