/* loader.c — the training data of a run: which tokens each step trains on,
 * where that stream stands (saved in a checkpoint, restored on resume), and
 * the prefetch thread that prepares the next batch while the step runs.
 *
 * --data is one file or a glob of files (sorted by name); each is a token
 * shard or plain text (byte-level tokens). Without --data: the built-in
 * corpus. Shard j holds nb_j = (ntok_j - 1) / BT batches, batch b being
 * tokens [b*BT, b*BT + BT + 1). An epoch visits every batch of every shard
 * once: in file order and batch order by default (one shard: llm.c's
 * sequential loader that wraps), or with --shuffle in llm.c's way: the shard
 * order and, within each shard, the batch order permuted afresh each epoch
 * by an RNG that is a pure function of (--seed, epoch). The position is
 * (epoch, k): the next batch is the k-th of that epoch's order.
 */
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gc_runtime_internal.h"

struct gcrt_loader {
    int n;                       /* shards */
    char **path;
    int *text;                   /* 1: plain text, bytes are tokens */
    long *first;                 /* global id of each shard's batch 0; first[n] = batches per epoch */
    long long epoch, k;          /* position of the batch prepare() makes next */
    long *order;                 /* this epoch's order of global batch ids */
    long long order_epoch;       /* the epoch `order` belongs to, -1: none */
    gcrt_rng rng;                /* the state that made `order` */
    gcrt_shard cur;              /* the shard held in memory */
    int cur_idx;                 /* its index, -1: none */
    int builtin;                 /* the built-in corpus, held in cur */
    long BT, V;                  /* BT: one global batch (every rank's rows) */
    int rank, nranks;            /* split programs: this rank takes rows rank*BT/nranks.. */
    unsigned long long seed;
    int shuffle;
    /* the batch prepared: tokens, where it came from, or an error */
    int32_t *in, *tg;
    int shard;
    long batch;
    int failed;
    char err[1024];
    /* prefetch */
    int threaded, want, ready, quit;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double prep_ms;              /* time spent preparing batches (summed) */
    double wait_ms;              /* the main thread's time in gcrt_data_next: waiting for the
                                    prefetch thread, or preparing (--no-prefetch) (summed) */
    long test_delay_ms;          /* GC_DATA_TEST_DELAY_MS (tests only): each batch takes this long */
};

enum { GCRT_STREAM_DATA = 4 };

/* ---------------------------------------------------------------- order */

static void shuffle_ids(long *a, long n, gcrt_rng *r)
{
    for (long i = n - 1; i > 0; i--) {
        long j = gcrt_rng_below(r, i + 1), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* The order of epoch e: identity, or shards permuted and batches permuted
 * within each shard, from an RNG seeded with (seed, epoch). */
static void make_order(gcrt_loader *L, long long e)
{
    long total = L->first[L->n];
    gcrt_rng_seed(&L->rng, L->seed ^ (uint64_t)e * 0x9E3779B97F4A7C15ull, GCRT_STREAM_DATA);
    L->order_epoch = e;
    if (!L->shuffle) {
        for (long i = 0; i < total; i++)
            L->order[i] = i;
        return;
    }
    gcrt_rng r = L->rng;
    long *sh = malloc((size_t)L->n * sizeof *sh), k = 0;
    for (int j = 0; j < L->n; j++)
        sh[j] = j;
    shuffle_ids(sh, L->n, &r);
    for (int i = 0; i < L->n; i++) {
        long j = sh[i], nb = L->first[j + 1] - L->first[j];
        for (long b = 0; b < nb; b++)
            L->order[k + b] = L->first[j] + b;
        shuffle_ids(L->order + k, nb, &r);
        k += nb;
    }
    free(sh);
}

/* ---------------------------------------------------------------- one batch */

static int shard_of(const gcrt_loader *L, long id)
{
    int lo = 0, hi = L->n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (L->first[mid] <= id)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Makes the batch at (epoch, k) into in/tg and advances the position. */
static void prepare(gcrt_loader *L)
{
    double t0 = gcrt_now_ms();
    if (L->order_epoch != L->epoch)
        make_order(L, L->epoch);
    long id = L->order[L->k];
    int j = shard_of(L, id);
    if (!L->builtin && L->cur_idx != j) {
        gcrt_shard_close(&L->cur);
        L->cur_idx = -1;
        if (gcrt_shard_load(&L->cur, L->path[j], L->text[j], L->BT + 1, L->V, L->err, sizeof L->err) != 0) {
            L->failed = 1;
            return;
        }
        L->cur_idx = j;
    }
    L->shard = j;
    L->batch = id - L->first[j];
    L->cur.pos = L->batch * L->BT;
    if (L->nranks > 1)   /* this rank's rows of the global batch (ranks.c) */
        gcrt_shard_next_rank(&L->cur, L->in, L->tg, L->BT / L->nranks, L->rank, L->nranks);
    else
        gcrt_shard_next(&L->cur, L->in, L->tg, L->BT);
    if (++L->k == L->first[L->n])
        L->k = 0, L->epoch++;
    if (L->test_delay_ms > 0) {
        struct timespec ts = {L->test_delay_ms / 1000, (L->test_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    L->prep_ms += gcrt_now_ms() - t0;
}

static void *prefetch_main(void *arg)
{
    gcrt_loader *L = arg;
    pthread_mutex_lock(&L->mu);
    for (;;) {
        while (!L->want && !L->quit)
            pthread_cond_wait(&L->cv, &L->mu);
        if (L->quit)
            break;
        pthread_mutex_unlock(&L->mu);
        prepare(L);
        pthread_mutex_lock(&L->mu);
        L->want = 0, L->ready = 1;
        pthread_cond_broadcast(&L->cv);
    }
    pthread_mutex_unlock(&L->mu);
    return NULL;
}

/* ---------------------------------------------------------------- opening */

static int add_files(gcrt_loader *L, const char *pattern)
{
    glob_t g;
    int rc = glob(pattern, GLOB_ERR, NULL, &g);
    if (rc == GLOB_NOMATCH && !strpbrk(pattern, "*?["))
        return 0;   /* a plain name that does not exist: opened below, "cannot open" */
    if (rc != 0) {
        globfree(&g);
        return gcrt_errorf("--data '%s': %s", pattern, rc == GLOB_NOMATCH ? "no file matches" : "cannot read");
    }
    L->path = calloc(g.gl_pathc, sizeof *L->path);
    for (size_t i = 0; L->path && i < g.gl_pathc; i++)
        L->path[L->n++] = strdup(g.gl_pathv[i]);
    globfree(&g);
    return 0;
}

static int open_files(gcrt_run *st, gcrt_loader *L)
{
    if (add_files(L, st->o.data))
        return 1;
    if (L->n == 0) {
        L->path = calloc(1, sizeof *L->path);
        L->path[L->n++] = strdup(st->o.data);
    }
    L->text = calloc((size_t)L->n, sizeof *L->text);
    L->first = calloc((size_t)L->n + 1, sizeof *L->first);
    if (!L->text || !L->first)
        return gcrt_errorf("out of host memory");
    char err[1024];
    for (int j = 0; j < L->n; j++) {
        long ntok;
        if (gcrt_shard_peek(L->path[j], L->BT + 1, L->V, &ntok, &L->text[j], err, sizeof err) != 0)
            return gcrt_errorf("%s", err);
        L->first[j + 1] = L->first[j] + (ntok - 1) / L->BT;
    }
    return 0;
}

int gcrt_data_open(gcrt_run *st)
{
    const gc_program *p = st->prog;
    char err[512];
    gcrt_loader *L = st->loader = calloc(1, sizeof *L);
    if (!L)
        return gcrt_errorf("out of host memory");
    int dp = gcrt_data_ranks(st);         /* ranks with rows of their own (tp: one per group) */
    long gbt = st->BT * dp;               /* one global batch (split programs: of every rank) */
    L->BT = gbt, L->rank = gcrt_data_rank(st), L->nranks = dp, L->V = p->V, L->seed = st->o.seed, L->shuffle = st->o.shuffle;
    L->cur_idx = -1, L->order_epoch = -1;
    const char *delay = getenv("GC_DATA_TEST_DELAY_MS");
    L->test_delay_ms = delay ? strtol(delay, NULL, 10) : 0;
    if (st->o.data) {
        if (open_files(st, L))
            return 1;
    } else {
        if (p->V < 256)   /* one token per byte: ids up to 255 */
            return gcrt_errorf("the built-in corpus is byte-level and needs V >= 256, but this program has V = %ld "
                               "(dim V, %s); pass --data FILE (token ids below %ld) or compile with V >= 256",
                               p->V, p->V_where ? p->V_where : p->graph_file, p->V);
        size_t n;
        const char *text = gcrt_corpus(&n);
        if (gcrt_shard_from_text(&L->cur, "built-in corpus", text, n, gbt + 1, p->V, err, sizeof err) != 0)
            return gcrt_errorf("%s", err);
        L->builtin = 1, L->n = 1, L->cur_idx = 0;
        L->first = calloc(2, sizeof *L->first);
        if (!L->first)
            return gcrt_errorf("out of host memory");
        L->first[1] = gcrt_shard_nbatches(&L->cur, gbt);
    }
    L->order = malloc((size_t)L->first[L->n] * sizeof *L->order);
    L->in = malloc((size_t)st->BT * sizeof *L->in);
    L->tg = malloc((size_t)st->BT * sizeof *L->tg);
    if (!L->order || !L->in || !L->tg)
        return gcrt_errorf("out of host memory for the data order (%ld batches)", L->first[L->n]);
    if (st->o.val_data) {
        if (gcrt_shard_open(&st->val, st->o.val_data, gbt + 1, p->V, err, sizeof err) != 0)
            return gcrt_errorf("%s", err);
        st->have_val = 1;
    }
    long ntok = L->builtin ? L->cur.ntok : 0;
    if (L->n == 1)
        printf("data: %s (%s%ld batches of B*T = %ld per epoch%s)\n", L->builtin ? "built-in corpus" : L->path[0],
               L->builtin ? "" : L->text[0] ? "plain text, byte-level tokens, " : "", L->first[1], st->BT,
               L->shuffle ? ", shuffled" : "");
    else
        printf("data: %d files matching '%s' (%ld batches of B*T = %ld per epoch, %s)\n", L->n, st->o.data,
               L->first[L->n], st->BT, L->shuffle ? "shard and batch order shuffled each epoch" : "in order");
    if (ntok)
        printf("data: %ld tokens\n", ntok);
    if (st->have_val)
        printf("val data: %s (%ld tokens, %ld batches)\n", st->val.name, st->val.ntok,
               gcrt_shard_nbatches(&st->val, st->BT));
    return 0;
}

/* ---------------------------------------------------------------- the stream */

/* The first batch is prepared on the calling thread (a bad first shard is
 * an error before step 1); then, with prefetch, the thread starts. */
int gcrt_data_start(gcrt_run *st)
{
    gcrt_loader *L = st->loader;
    prepare(L);
    if (L->failed)
        return gcrt_errorf("%s", L->err);
    L->ready = 1;
    if (!st->o.no_prefetch) {
        pthread_mutex_init(&L->mu, NULL);
        pthread_cond_init(&L->cv, NULL);
        if (pthread_create(&L->thread, NULL, prefetch_main, L) != 0)
            return gcrt_errorf("cannot start the prefetch thread");
        L->threaded = 1;
    }
    return 0;
}

int gcrt_data_next(gcrt_run *st, int *shard, long *batch)
{
    gcrt_loader *L = st->loader;
    double t0 = gcrt_now_ms();
    if (L->threaded) {
        pthread_mutex_lock(&L->mu);
        while (!L->ready)
            pthread_cond_wait(&L->cv, &L->mu);
        pthread_mutex_unlock(&L->mu);
        L->wait_ms += gcrt_now_ms() - t0;
    }
    if (L->failed)
        return gcrt_errorf("%s", L->err);
    memcpy(st->inputs, L->in, (size_t)st->BT * sizeof *L->in);
    memcpy(st->targets, L->tg, (size_t)st->BT * sizeof *L->tg);
    *shard = L->shard, *batch = L->batch;
    st->data_epoch = L->epoch, st->data_k = L->k;   /* the position after this batch */
    if (L->threaded) {
        pthread_mutex_lock(&L->mu);
        L->ready = 0, L->want = 1;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
    } else {
        prepare(L);
        L->wait_ms += gcrt_now_ms() - t0;
    }
    return 0;
}

void gcrt_data_position(const gcrt_run *st, gcrt_state *s)
{
    gcrt_rng r;
    gcrt_rng_seed(&r, st->o.seed ^ (uint64_t)st->data_epoch * 0x9E3779B97F4A7C15ull, GCRT_STREAM_DATA);
    s->data_epoch = st->data_epoch;
    s->data_pos = st->data_k;
    s->flags = st->o.shuffle ? GCRT_STF_SHUFFLE : 0;
    memcpy(s->data_rng, r.s, sizeof s->data_rng);
}

int gcrt_data_seek(gcrt_run *st, const gcrt_state *s)
{
    gcrt_loader *L = st->loader;
    long total = L->first[L->n];
    if (s->data_pos >= total)
        return gcrt_errorf("resume: the checkpoint's data position (batch %lld of epoch %lld) lies past this "
                           "data's %ld batches per epoch; resume with the --data it was trained on",
                           s->data_pos, s->data_epoch, total);
    if (!(s->flags & GCRT_STF_SHUFFLE) != !L->shuffle)
        return gcrt_errorf("resume: the checkpoint was written by a run %s --shuffle, this run is %s it (another "
                           "data order); resume %s --shuffle", L->shuffle ? "without" : "with",
                           L->shuffle ? "with" : "without", L->shuffle ? "without" : "with");
    gcrt_rng r;
    gcrt_rng_seed(&r, st->o.seed ^ (uint64_t)s->data_epoch * 0x9E3779B97F4A7C15ull, GCRT_STREAM_DATA);
    if (L->shuffle && memcmp(r.s, s->data_rng, sizeof r.s) != 0)
        return gcrt_errorf("resume: the checkpoint's data order was drawn with another --seed (saved seed %llu, "
                           "this run %llu); resume with --seed %llu", (unsigned long long)s->seed, st->o.seed,
                           (unsigned long long)s->seed);
    L->epoch = s->data_epoch, L->k = s->data_pos;
    st->data_epoch = s->data_epoch, st->data_k = s->data_pos;
    return 0;
}

double gcrt_data_prep_ms(const gcrt_run *st)
{
    gcrt_loader *L = st->loader;
    if (!L)
        return 0;
    if (!L->threaded)
        return L->prep_ms;
    pthread_mutex_lock(&L->mu);   /* the prefetch thread may be preparing the batch after the last: let it finish */
    while (L->want && !L->quit)
        pthread_cond_wait(&L->cv, &L->mu);
    double ms = L->prep_ms;
    pthread_mutex_unlock(&L->mu);
    return ms;
}

double gcrt_data_wait_ms(const gcrt_run *st) { return st->loader ? st->loader->wait_ms : 0; }

void gcrt_data_close(gcrt_run *st)
{
    gcrt_loader *L = st->loader;
    if (!L)
        return;
    if (L->threaded) {
        pthread_mutex_lock(&L->mu);
        L->quit = 1;
        pthread_cond_broadcast(&L->cv);
        pthread_mutex_unlock(&L->mu);
        pthread_join(L->thread, NULL);
    }
    gcrt_shard_close(&L->cur);
    for (int j = 0; L->path && j < L->n; j++)
        free(L->path[j]);
    free(L->path), free(L->text), free(L->first), free(L->order), free(L->in), free(L->tg);
    free(L);
    st->loader = NULL;
}
