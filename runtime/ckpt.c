/* ckpt.c — checkpoints a run writes and resumes from (docs/checkpoints.md).
 *
 * A checkpoint of step N in --ckpt-dir DIR is two files:
 *   DIR/model_NNNNNNNN.bin   the llm.c model file (version 3, fp32)
 *   DIR/state_NNNNNNNN.bin   the training state (state.c)
 * Each is written atomically (name.tmp, fsync, rename, fsync of DIR), the
 * model first: a state file exists only beside its complete model file, so
 * the state file is the mark of a complete checkpoint. --keep K deletes all
 * but the newest K (state first, then model). --save FILE writes the model
 * file alone after training.
 */
#define _DEFAULT_SOURCE 1   /* flock */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gc_runtime_internal.h"

/* ---------------------------------------------------------------- files */

/* dir/name, atomically (files.c); a device or FIFO there is refused, never
 * replaced. On failure dir/name is untouched and no temporary file is left. */
static int write_atomic(const char *dir, const char *name, const gcrt_part *parts, int nparts, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return gcrt_write_file(path, parts, nparts, GCRT_W_TEST_DELAY, err, errlen);
}

/* ---------------------------------------------------------------- the directory */

static void ckpt_name(char *buf, size_t len, const char *kind, long long step)
{
    snprintf(buf, len, "%s_%08lld.bin", kind, step);
}

/* The steps of DIR's files kind_NNNNNNNN.bin, ascending; returns the count
 * (or -1 when DIR cannot be read). *steps is malloc'd. */
static long list_steps(const char *dir, const char *kind, long long **steps)
{
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    long n = 0, cap = 0;
    size_t klen = strlen(kind);
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        if (strlen(s) != klen + 13 || strncmp(s, kind, klen) || s[klen] != '_' || strcmp(s + klen + 9, ".bin"))
            continue;
        long long v = 0;
        int ok = 1;
        for (int i = 0; i < 8; i++)
            ok &= s[klen + 1 + i] >= '0' && s[klen + 1 + i] <= '9', v = v * 10 + (s[klen + 1 + i] - '0');
        if (!ok)
            continue;
        if (n == cap) {
            long long *g = realloc(*steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g)
                break;
            *steps = g;
        }
        long i = n++;
        for (; i > 0 && (*steps)[i - 1] > v; i--)
            (*steps)[i] = (*steps)[i - 1];
        (*steps)[i] = v;
    }
    closedir(d);
    return n;
}

/* DIR/.lock, locked for the life of the process (the kernel lets go when
 * it ends, however it ends); it holds the pid of the run, for the message. */
static int lock_dir(gcrt_run *st, const char *dir)
{
    char path[4200], pid[32];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        return gcrt_errorf("--ckpt-dir %s: cannot create %s: %s", dir, path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        ssize_t n = read(fd, pid, sizeof pid - 1);
        close(fd);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (e == EWOULDBLOCK)
            return gcrt_errorf("--ckpt-dir %s: another run (pid %s) is using it (%s is locked); give each run its "
                               "own --ckpt-dir", dir, *pid ? pid : "?", path);
        return gcrt_errorf("--ckpt-dir %s: cannot lock %s: %s", dir, path, strerror(e));
    }
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return gcrt_errorf("--ckpt-dir %s: cannot write %s: %s", dir, path, strerror(e));
    }
    st->lock_fd = fd;
    return 0;
}

static int dir_open_rank0(gcrt_run *st, const char *dir)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (mkdir(dir, 0755) != 0)
            return gcrt_errorf("--ckpt-dir %s: cannot create the directory: %s", dir, strerror(errno));
    } else if (!S_ISDIR(sb.st_mode)) {
        return gcrt_errorf("--ckpt-dir %s: not a directory", dir);
    }
    if (access(dir, W_OK | X_OK) != 0)
        return gcrt_errorf("--ckpt-dir %s: not writable: %s", dir, strerror(errno));
    return lock_dir(st, dir);
}

int gcrt_ckpt_dir_open(gcrt_run *st)
{
    int rc = st->ctx.rank == 0 ? dir_open_rank0(st, st->o.ckpt_dir) : 0;
    if (st->ctx.nranks > 1 && gcrt_group_any(st, rc))   /* the others wait for DIR (and its lock) */
        return 1;
    return rc;
}

long gcrt_ckpt_newest_before(const char *dir, long below)
{
    long long *steps;
    long n = list_steps(dir, "state", &steps), best = 0;
    for (long i = 0; i < n; i++)
        if (steps[i] < below)
            best = (long)steps[i];
    free(steps);
    return best;
}

/* --keep K: all but the newest K checkpoints go, each state file before its
 * model file (a state never outlives its model); so do model files without
 * a state that are older than the newest checkpoint (left by a run stopped
 * between the two renames). */
static void prune(const char *dir, long keep)
{
    long long *st, *md;
    long ns = list_steps(dir, "state", &st), nm = list_steps(dir, "model", &md);
    char path[4200], name[64];
    for (long i = 0; keep > 0 && i + keep < ns; i++) {
        ckpt_name(name, sizeof name, "state", st[i]);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        unlink(path);
    }
    long long newest = ns > 0 ? st[ns - 1] : -1;
    for (long i = 0; i < nm; i++) {
        int has_state = 0, kept = 1;
        for (long k = 0; k < ns; k++)
            if (st[k] == md[i])
                has_state = 1, kept = keep <= 0 || k + keep >= ns;
        if ((has_state && !kept) || (!has_state && md[i] < newest)) {
            ckpt_name(name, sizeof name, "model", md[i]);
            snprintf(path, sizeof path, "%s/%s", dir, name);
            unlink(path);
        }
    }
    free(st);
    free(md);
}

void gcrt_params_put(gcrt_run *st, const float *params)
{
    const gc_program *p = st->prog;
    size_t n = (size_t)p->nparam_elems * 4;
    if (p->masters_host_off) {   /* bf16 offload: the masters on the host, the device their bf16 copies */
        gc_device_sync();
        memcpy(st->ctx.region[GC_REGION_HOST] + p->masters_host_off, params, n);
    } else {
        gc_device_upload(st->ctx.region[GC_REGION_PARAMS], params, n);
    }
    p->run(&st->ctx, GC_PHASE_PARAMS);
    gc_device_sync();
}

void gcrt_params_get(gcrt_run *st, float *params)
{
    const gc_program *p = st->prog;
    size_t n = (size_t)p->nparam_elems * 4;
    if (p->masters_host_off) {
        gc_device_sync();        /* the host updates of the step are done */
        memcpy(params, st->ctx.region[GC_REGION_HOST] + p->masters_host_off, n);
    } else {
        gc_device_download(params, st->ctx.region[GC_REGION_PARAMS], n);
    }
}

void gcrt_optstate_get(gcrt_run *st, void *dst)
{
    const gc_program *p = st->prog;
    if (p->optstate_host_bytes) {   /* --offload opt: host memory, complete after the step's last wait */
        gc_device_sync();
        memcpy(dst, st->ctx.region[GC_REGION_HOST], p->optstate_host_bytes);
    } else {
        gc_device_download(dst, st->ctx.region[GC_REGION_OPTSTATE], p->region_bytes[GC_REGION_OPTSTATE]);
    }
}

void gcrt_optstate_put(gcrt_run *st, const void *src)
{
    const gc_program *p = st->prog;
    if (p->optstate_host_bytes)
        memcpy(st->ctx.region[GC_REGION_HOST], src, p->optstate_host_bytes);
    else
        gc_device_upload(st->ctx.region[GC_REGION_OPTSTATE], src, p->region_bytes[GC_REGION_OPTSTATE]);
}

/* Params and optimizer state from the device into host buffers: the whole
 * parameters (zero3: the shards gathered) and the training state's optimizer
 * state (zero1-3: every rank's region, gathered in rank order). Collective
 * in split programs: every rank calls it. 0 or exit status 1. */
static int download_state(gcrt_run *st, void *optstate)
{
    const gc_program *p = st->prog;
    size_t nos = gcrt_optstate_local_bytes(p);
    if (p->nparam_elems && (p->nshards || p->tp)) {
        if (gcrt_download_shards(st))
            return 1;
    } else if (p->nparam_elems) {
        gcrt_params_get(st, st->params);
    }
    if (!nos)
        return 0;
    if (gcrt_state_optstate_bytes(p) == nos) {
        gcrt_optstate_get(st, optstate);
        return 0;
    }
    float *whole = optstate;
    gcrt_optstate_get(st, whole + (size_t)st->ctx.rank * (nos / 4));
    p->comm->allgather_floats(whole, (long)(nos / 4), GC_GROUP_ALL);
    return 0;
}

int gcrt_ckpt_write(gcrt_run *st, long step)
{
    const gc_program *p = st->prog;
    const char *dir = st->o.ckpt_dir;
    size_t nos = gcrt_state_optstate_bytes(p), np = (size_t)p->nparam_elems * 4;
    void *optstate = malloc(nos ? nos : 1);
    if (!optstate)
        return gcrt_errorf("checkpoint step %ld: cannot allocate %zu bytes for the optimizer state", step, nos);
    if (download_state(st, optstate)) {
        free(optstate);
        return 1;
    }
    if (st->ctx.rank != 0) {     /* split programs: rank 0 writes */
        free(optstate);
        st->last_ckpt = step;
        return 0;
    }
    char why[512];               /* a checkpoint is only ever of a run that has not diverged */
    if (gcrt_check_finite(st->params, p->nparam_elems, p, "the parameters", why, sizeof why) ||
        gcrt_check_finite(optstate, (long)(nos / 4), NULL, "the optimizer state", why, sizeof why)) {
        free(optstate);
        if (st->last_ckpt > 0)
            return gcrt_errorf("checkpoint step %ld: not written: %s (the run diverged); the previous checkpoint "
                               "(step %ld in %s) is intact", step, why, st->last_ckpt, dir);
        return gcrt_errorf("checkpoint step %ld: not written: %s (the run diverged); no earlier checkpoint of this "
                           "run in %s", step, why, dir);
    }
    gcrt_state s;
    gcrt_state_init(&s, p);
    s.step = step;
    s.params_sum = gcrt_checksum(0, st->params, np);
    s.seed = st->o.seed;
    gcrt_data_position(st, &s);
    s.skipped = st->skipped;
    unsigned char mh[GCRT_HEADER_BYTES], sh[GCRT_HEADER_BYTES];
    gcrt_ckpt_header(mh, p);
    gcrt_state_header(sh, &s, optstate);
    gcrt_part model[2] = {{mh, sizeof mh}, {st->params, np}}, state[2] = {{sh, sizeof sh}, {optstate, nos}};
    char mname[64], sname[64], err[4400];
    ckpt_name(mname, sizeof mname, "model", step);
    ckpt_name(sname, sizeof sname, "state", step);
    gcrt_progress_break();
    printf("checkpoint: writing step %ld to %s ...\n", step, dir);
    fflush(stdout);
    /* -1: the file is not there (a device or FIFO in its place is left
     * alone); -2: it is, its directory not synced. A model file without its
     * state is no checkpoint, and no state may outlive its model: on any
     * failure what this save renamed into place is taken back. */
    char path[4200];
    int rc = write_atomic(dir, mname, model, 2, err, sizeof err), rs = 0;
    if (rc == 0 && (rs = write_atomic(dir, sname, state, 2, err, sizeof err)) != 0) {
        if (rs == -2) {
            snprintf(path, sizeof path, "%s/%s", dir, sname);
            unlink(path);
        }
        rc = rs;
    }
    if (rc == -2 || rs != 0) {
        snprintf(path, sizeof path, "%s/%s", dir, mname);
        unlink(path);
    }
    free(optstate);
    if (rc != 0) {
        if (st->last_ckpt > 0)
            return gcrt_errorf("%s; the previous checkpoint (step %ld in %s) is intact", err, st->last_ckpt, dir);
        return gcrt_errorf("%s; no earlier checkpoint of this run in %s", err, dir);
    }
    st->last_ckpt = step;
    prune(dir, st->o.keep);
    printf("checkpoint: step %ld saved (%s, %s)\n", step, mname, sname);
    fflush(stdout);
    return 0;
}

int gcrt_ckpt_resume(gcrt_run *st, int *found)
{
    const gc_program *p = st->prog;
    const char *dir = st->o.resume;
    long long *steps;
    long n = list_steps(dir, "state", &steps);
    *found = 0;
    if (n < 0)
        return gcrt_errorf("--resume %s: cannot read the directory: %s", dir, strerror(errno));
    if (n == 0) {
        free(steps);
        printf("resume: no checkpoint in %s, starting at step 1\n", dir);
        return 0;
    }
    long long step = steps[n - 1];
    free(steps);
    char name[64], spath[4200], mpath[4200], err[4400];
    ckpt_name(name, sizeof name, "state", step);
    snprintf(spath, sizeof spath, "%s/%s", dir, name);
    ckpt_name(name, sizeof name, "model", step);
    snprintf(mpath, sizeof mpath, "%s/%s", dir, name);
    gcrt_state s;
    if (gcrt_state_read(spath, &st->resume_buf, &s, err, sizeof err) != 0 ||
        gcrt_state_check(&s, p, spath, err, sizeof err) != 0 ||
        gcrt_ckpt_load(st->params, p, mpath, err, sizeof err) != 0)
        return gcrt_errorf("%s", err);
    if (gcrt_checksum(0, st->params, (size_t)p->nparam_elems * 4) != s.params_sum)
        return gcrt_errorf("%s: offset %d: the parameters do not match the checksum in %s (the model file is "
                           "corrupt or from another checkpoint)", mpath, GCRT_HEADER_BYTES, spath);
    if (gcrt_data_seek(st, &s) != 0)
        return 1;
    st->resume_optstate = s.optstate;   /* zero1-3: this rank's region of the gathered ones */
    if (p->optstate_sharded && st->ctx.nranks > 1)
        st->resume_optstate += (size_t)st->ctx.rank * gcrt_optstate_local_bytes(p);
    if (st->o.steps > 0 && st->o.steps < s.step)
        return gcrt_errorf("--resume %s: the checkpoint is of step %lld, past --steps %ld: nothing to do (pass the "
                           "first run's --steps, or --steps 0 to only load it)", dir, s.step, st->o.steps);
    st->first_step = (long)s.step + 1;
    st->last_ckpt = (long)s.step;
    st->skipped = s.skipped;
    *found = 1;
    printf("resume: step %lld from %s\n", s.step, spath);
    return 0;
}

int gcrt_save_final(gcrt_run *st)
{
    const gc_program *p = st->prog;
    char err[512];
    if (p->nparam_elems && (p->nshards || p->tp)) {       /* zero3: the shards gathered (every rank takes part) */
        if (gcrt_download_shards(st))
            return 1;
    } else if (p->nparam_elems) {
        gcrt_params_get(st, st->params);
    }
    if (st->ctx.rank != 0)                     /* split programs: rank 0 writes */
        return 0;
    if (gcrt_st_is_save_path(st->o.save)) {     /* safetensors.c */
        if (gcrt_st_save(st->o.save, p, st->params, st->o.save_bf16, err, sizeof err) != 0)
            return gcrt_errorf("%s", err);
        printf("saved %s (safetensors, %s)\n", st->o.save, st->o.save_bf16 ? "BF16" : "F32");
        return 0;
    }
    if (gcrt_ckpt_save(st->o.save, p, st->params, err, sizeof err) != 0)
        return gcrt_errorf("%s", err);
    printf("saved %s (%lld bytes)\n", st->o.save, GCRT_HEADER_BYTES + 4LL * p->nparam_elems);
    return 0;
}
