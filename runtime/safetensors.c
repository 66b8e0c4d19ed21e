/* safetensors.c — Hugging Face safetensors checkpoints: --init FILE.safetensors
 * and --save FILE.safetensors (docs/checkpoints.md).
 *
 * The format: an 8-byte little-endian header length N, N bytes of JSON (read
 * and written with jansson) mapping each tensor's name to {"dtype", "shape",
 * "data_offsets": [begin, end]} (bytes from the end of the header), plus an
 * optional "__metadata__" object of strings; then the tensors' bytes,
 * little-endian, row-major, with no gaps.
 *
 * Which tensor holds which parameter comes from the program's table
 * (gc_param_info.st_*, the graph's `from "…"`), so this file knows no model.
 * Every offset and size in the header is checked against the file before a
 * byte of data is read; every error names the file, the byte offset and the
 * tensor. F32, BF16 and F16 tensors load into the fp32 masters; saves write
 * F32 (or BF16, --save-dtype bf16) atomically (a temporary file renamed).
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gc_runtime_internal.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c moves little-endian tensors with plain copies: port it to this host first"
#endif

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---------------------------------------------------------------- dtypes */

enum { ST_F32, ST_BF16, ST_F16, ST_OTHER };

static const struct {
    const char *name;
    int size;
} st_dtypes[] = {
    {"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}, {"I64", 8}, {"U64", 8}, {"I32", 4}, {"U32", 4},
    {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1},
};
enum { ST_NDTYPES = sizeof st_dtypes / sizeof st_dtypes[0] };

static int dtype_index(const char *s)
{
    for (int i = 0; i < ST_NDTYPES; i++)
        if (!strcmp(s, st_dtypes[i].name))
            return i;
    return -1;
}

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = h >> 10 & 31, m = h & 1023, u;
    if (e == 31) {
        u = sign | 0x7f800000u | m << 13;               /* inf, NaN (payload kept) */
    } else if (e) {
        u = sign | (e + 112) << 23 | m << 13;           /* normal: rebias 15 -> 127 */
    } else if (m) {                                     /* subnormal: normalise */
        int s = 0;
        while (!(m & 1024))
            m <<= 1, s++;
        u = sign | (uint32_t)(113 - s) << 23 | (m & 1023) << 13;
    } else {
        u = sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* round to nearest even; NaN stays a (quiet) NaN */
static uint16_t f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(u >> 16 | 0x40);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1)) >> 16);
}

/* ---------------------------------------------------------------- the header */

#define ST_MAX_HEADER 100000000LL   /* as Hugging Face's reader: a larger header is refused */
#define ST_MAX_RANK 64

typedef struct {
    const char *name;              /* points into the parsed header */
    int dtype;                     /* index into st_dtypes */
    int rank;
    long long shape[ST_MAX_RANK];
    long long numel;
    long long begin, end;          /* data_offsets */
    int used;                      /* read into a parameter */
} st_entry;

typedef struct {
    const char *path;
    FILE *f;
    long long size;                /* of the file */
    long long hlen;                /* N */
    long long data;                /* 8 + N: where offsets count from */
    json_t *root;
    st_entry *e;                   /* the tensors, sorted by name */
    long n;
} st_file;

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int cmp_begin(const void *a, const void *b)
{
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static long long json_int_or(json_t *v, long long bad)
{
    return json_is_integer(v) ? (long long)json_integer_value(v) : bad;
}

/* One tensor's header entry into *e; its offsets within the data (dlen bytes). */
static int parse_entry(st_file *sf, const char *name, json_t *v, st_entry *e, char *err, size_t errlen)
{
    const char *p = sf->path;
    long long h = 8;   /* the errors point at the header */
    if (!json_is_object(v))
        return fail(err, errlen, "%s: offset %lld: tensor '%s': its header entry is not an object", p, h, name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt))
        return fail(err, errlen, "%s: offset %lld: tensor '%s': no \"dtype\" string", p, h, name);
    e->name = name;
    e->dtype = dtype_index(json_string_value(dt));
    if (e->dtype < 0)
        return fail(err, errlen, "%s: offset %lld: tensor '%s': unknown dtype \"%.40s\"", p, h, name,
                    json_string_value(dt));
    if (!json_is_array(shape) || json_array_size(shape) > ST_MAX_RANK)
        return fail(err, errlen, "%s: offset %lld: tensor '%s': \"shape\" is not an array of at most %d sizes", p,
                    h, name, ST_MAX_RANK);
    e->rank = (int)json_array_size(shape);
    e->numel = 1;
    for (int k = 0; k < e->rank; k++) {
        long long d = json_int_or(json_array_get(shape, (size_t)k), -1);
        if (d < 0)
            return fail(err, errlen, "%s: offset %lld: tensor '%s': shape[%d] is not a size", p, h, name, k);
        e->shape[k] = d;
        if (__builtin_mul_overflow(e->numel, d, &e->numel) || e->numel > (1LL << 59))   /* x 8 bytes fits */
            return fail(err, errlen, "%s: offset %lld: tensor '%s': its shape has more than 2^59 elements", p, h,
                        name);
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return fail(err, errlen, "%s: offset %lld: tensor '%s': \"data_offsets\" is not [begin, end]", p, h, name);
    e->begin = json_int_or(json_array_get(offs, 0), -1);
    e->end = json_int_or(json_array_get(offs, 1), -1);
    long long dlen = sf->size - sf->data;
    if (e->begin < 0 || e->end < e->begin)
        return fail(err, errlen, "%s: offset %lld: tensor '%s': data_offsets [%lld, %lld] are not a range", p, h,
                    name, e->begin, e->end);
    if (e->end > dlen)
        return fail(err, errlen, "%s: offset %lld: tensor '%s': data_offsets [%lld, %lld] run past the end of the "
                    "file (%lld data bytes; the file is truncated or the header lies)", p, sf->data + e->begin, name,
                    e->begin, e->end, dlen);
    if (e->end - e->begin != e->numel * st_dtypes[e->dtype].size)
        return fail(err, errlen, "%s: offset %lld: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes; %lld "
                    "%s elements need %lld", p, sf->data + e->begin, name, e->begin, e->end, e->end - e->begin,
                    e->numel, st_dtypes[e->dtype].name, e->numel * st_dtypes[e->dtype].size);
    return 0;
}

/* The tensors' byte ranges cover the data exactly once (the format has no
 * gaps and no overlaps). */
static int check_layout(st_file *sf, char *err, size_t errlen)
{
    st_entry **by = malloc((size_t)(sf->n ? sf->n : 1) * sizeof *by);
    if (!by)
        return fail(err, errlen, "%s: out of memory", sf->path);
    for (long i = 0; i < sf->n; i++)
        by[i] = &sf->e[i];
    qsort(by, (size_t)sf->n, sizeof *by, cmp_begin);
    long long at = 0, dlen = sf->size - sf->data;
    int rc = 0;
    for (long i = 0; i < sf->n && rc == 0; i++) {
        if (by[i]->begin < at)
            rc = fail(err, errlen, "%s: offset %lld: tensors '%s' and '%s' overlap (data_offsets [%lld, %lld] and "
                      "[%lld, %lld]; the header lies)", sf->path, sf->data + by[i]->begin, by[i - 1]->name,
                      by[i]->name, by[i - 1]->begin, by[i - 1]->end, by[i]->begin, by[i]->end);
        else if (by[i]->begin > at)
            rc = fail(err, errlen, "%s: offset %lld: data bytes [%lld, %lld) belong to no tensor (before '%s'; the "
                      "format has no gaps)", sf->path, sf->data + at, at, by[i]->begin, by[i]->name);
        if (by[i]->end > at)
            at = by[i]->end;
    }
    if (rc == 0 && at != dlen)
        rc = fail(err, errlen, "%s: offset %lld: %lld bytes after the last tensor belong to no tensor", sf->path,
                  sf->data + at, dlen - at);
    free(by);
    return rc;
}

static void st_close(st_file *sf)
{
    if (sf->f)
        fclose(sf->f);
    json_decref(sf->root);
    free(sf->e);
    memset(sf, 0, sizeof *sf);
}

/* Opens path without blocking (a FIFO is refused, not waited on). */
static FILE *open_regular(const char *path, long long *size, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) {
        fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        fail(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    *size = (long long)st.st_size;
    return f;
}

/* Reads and checks the header of path: every entry, every range. */
static int st_open(st_file *sf, const char *path, char *err, size_t errlen)
{
    memset(sf, 0, sizeof *sf);
    sf->path = path;
    if (!(sf->f = open_regular(path, &sf->size, err, errlen)))
        return -1;
    unsigned char h8[8];
    if (sf->size < 8 || fread(h8, 1, 8, sf->f) != 8)
        return fail(err, errlen, "%s: offset 0: the file (%lld bytes) ends inside the 8-byte header length", path,
                    sf->size);
    unsigned long long n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | h8[i];
    if (n > (unsigned long long)ST_MAX_HEADER)
        return fail(err, errlen, "%s: offset 0: header length %llu is above the limit of %lld bytes (not a "
                    "safetensors file, or a corrupt one)", path, n, ST_MAX_HEADER);
    if ((long long)n > sf->size - 8)
        return fail(err, errlen, "%s: offset 0: header length %llu runs past the end of the file (%lld bytes; "
                    "truncated)", path, n, sf->size);
    if (n < 2)
        return fail(err, errlen, "%s: offset 0: header length %llu is too short for a JSON object", path, n);
    sf->hlen = (long long)n;
    sf->data = 8 + sf->hlen;
    char *buf = malloc((size_t)n);
    if (!buf)
        return fail(err, errlen, "%s: cannot allocate %llu bytes for the header", path, n);
    if (fread(buf, 1, (size_t)n, sf->f) != (size_t)n) {
        free(buf);
        return fail(err, errlen, "%s: offset 8: read error in the header: %s", path,
                    ferror(sf->f) ? strerror(errno) : "unexpected end of file");
    }
    json_error_t je;
    sf->root = json_loadb(buf, (size_t)n, JSON_REJECT_DUPLICATES, &je);
    if (!sf->root) {
        /* a duplicate name: jansson stops after the key; name it (the last string before) */
        char dup[160] = "";
        size_t e = je.position < (int)n && je.position > 0 ? (size_t)je.position : 0;
        while (e > 0 && buf[e - 1] != '"')
            e--;
        size_t b = e > 0 ? e - 1 : 0;
        while (b > 0 && buf[b - 1] != '"')
            b--;
        if (strstr(je.text, "duplicate") && e > b + 1 && e - 1 - b < sizeof dup - 8)
            snprintf(dup, sizeof dup, " '%.*s'", (int)(e - 1 - b), buf + b);
        free(buf);
        return fail(err, errlen, "%s: offset %lld: header JSON: %s%s", path, 8 + (long long)je.position, je.text,
                    dup);
    }
    free(buf);
    if (!json_is_object(sf->root))
        return fail(err, errlen, "%s: offset 8: the header is not a JSON object", path);
    size_t cap = json_object_size(sf->root);
    sf->e = calloc(cap ? cap : 1, sizeof *sf->e);
    if (!sf->e)
        return fail(err, errlen, "%s: out of memory for %zu header entries", path, cap);
    const char *key;
    json_t *v;
    json_object_foreach(sf->root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v))
                return fail(err, errlen, "%s: offset 8: \"__metadata__\" is not an object", path);
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv))
                    return fail(err, errlen, "%s: offset 8: \"__metadata__\" entry '%s' is not a string", path, mk);
            }
            continue;
        }
        if (parse_entry(sf, key, v, &sf->e[sf->n], err, errlen) != 0)
            return -1;
        sf->n++;
    }
    if (check_layout(sf, err, errlen) != 0)
        return -1;
    qsort(sf->e, (size_t)sf->n, sizeof *sf->e, cmp_name);
    return 0;
}

static st_entry *st_find(st_file *sf, const char *name)
{
    st_entry key = {.name = name};
    return bsearch(&key, sf->e, (size_t)sf->n, sizeof *sf->e, cmp_name);
}

/* ---------------------------------------------------------------- parameters <-> tensors */

/* q as the loader reads it: a table without checkpoint names (a program
 * made by hand, no st_pre) names each parameter whole after itself. */
static gc_param_info effective(const gc_param_info *q)
{
    gc_param_info e = *q;
    if (!e.st_where)
        e.st_where = "the program's table";
    if (!e.st_pre) {
        e.st_pre = e.name, e.st_post = NULL, e.st_layers = 0, e.st_transposed = 0, e.st_nalts = 0;
        e.st_rank = e.rank;
        for (int k = 0; k < e.rank; k++)
            e.st_pshape[k] = e.st_shape[k] = e.shape[k];
    }
    return e;
}

/* Tensor k of parameter q: its name, and where its part of the parameter
 * starts in the whole params (elements). */
static long tensor_base(const gc_param_info *q, long k, char *name, size_t len)
{
    long per = q->st_layers ? q->numel / q->st_layers : q->numel;
    if (q->st_layers)
        snprintf(name, len, "%s%ld%s", q->st_pre, k, q->st_post);
    else
        snprintf(name, len, "%s", q->st_pre);
    return q->offset + k * per;
}

/* "[a, b]" */
static void shape_text(char *buf, size_t len, int rank, const long long *s)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int k = 0; k < rank && at < len; k++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", k ? ", " : "", s[k]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

/* The element map of one tensor: the file's element e (row-major in
 * st_shape) sits in the parameter at dst(e). Rows are the file's last axis. */
typedef struct {
    long rows, rowlen;
    long step;                     /* dst elements between neighbours of a row */
    long long pstride[8];          /* the parameter's strides (one tensor, pshape) */
    const gc_param_info *q;
} elem_map;

static void map_init(elem_map *m, const gc_param_info *q)
{
    int r = q->st_rank;
    memset(m, 0, sizeof *m);
    m->q = q;
    m->rowlen = r ? q->st_shape[r - 1] : 1;
    m->rows = 1;
    for (int k = 0; k + 1 < r; k++)
        m->rows *= q->st_shape[k];
    long long s = 1;
    for (int k = r - 1; k >= 0; k--)
        m->pstride[k] = s, s *= q->st_pshape[k];
    m->step = q->st_transposed && r == 2 ? (long)m->pstride[0] : 1;
}

/* dst offset (within the tensor's part) of the file's row `row`, column 0 */
static long long map_row(const elem_map *m, long row)
{
    const gc_param_info *q = m->q;
    if (q->st_transposed)
        return row;                 /* file (row, c) = parameter (c, row) */
    long long off = 0;
    for (int k = q->st_rank - 2; k >= 0; k--) {
        off += (row % q->st_shape[k]) * m->pstride[k];
        row /= q->st_shape[k];
    }
    return off;
}

/* Is the file's tensor e the shape this parameter's tensor wants? */
static int check_shape(const st_file *sf, const st_entry *e, const gc_param_info *q, long k, char *err,
                       size_t errlen)
{
    int ok = e->rank == q->st_rank;
    for (int i = 0; ok && i < e->rank; i++)
        ok = e->shape[i] == q->st_shape[i];
    if (ok)
        return 0;
    long long want[8];
    for (int i = 0; i < q->st_rank; i++)
        want[i] = q->st_shape[i];
    char got[256], wants[256], layer[48] = "";
    shape_text(got, sizeof got, e->rank, e->shape);
    shape_text(wants, sizeof wants, q->st_rank, want);
    if (q->st_layers)
        snprintf(layer, sizeof layer, ", layer %ld", k);
    return fail(err, errlen, "%s: offset %lld: tensor '%s' has shape %s; parameter '%s'%s wants %s%s (%s)", sf->path,
                sf->data + e->begin, e->name, got, q->name, layer, wants,
                q->st_transposed ? ", the transpose of its matrix" : "", q->st_where);
}

enum { CHUNK_ELEMS = 1 << 18 };

/* Reads tensor e into the parameter's part at dst (widened to fp32). */
static int read_tensor(st_file *sf, const st_entry *e, const gc_param_info *q, float *dst, void *buf, char *err,
                       size_t errlen)
{
    elem_map m;
    map_init(&m, q);
    int size = st_dtypes[e->dtype].size;
    if (fseeko(sf->f, (off_t)(sf->data + e->begin), SEEK_SET) != 0)
        return fail(err, errlen, "%s: offset %lld: cannot seek to tensor '%s': %s", sf->path, sf->data + e->begin,
                    e->name, strerror(errno));
    long long total = e->numel;
    for (long long done = 0; done < total;) {
        long n = total - done < CHUNK_ELEMS ? (long)(total - done) : CHUNK_ELEMS;
        if (fread(buf, (size_t)size, (size_t)n, sf->f) != (size_t)n)
            return fail(err, errlen, "%s: offset %lld: cannot read tensor '%s': %s", sf->path,
                        sf->data + e->begin + done * size, e->name,
                        ferror(sf->f) ? strerror(errno) : "unexpected end of file");
        for (long i = 0; i < n;) {
            long long el = done + i;
            long row = (long)(el / m.rowlen), col = (long)(el % m.rowlen);
            long run = m.rowlen - col < n - i ? m.rowlen - col : n - i;
            float *d = dst + map_row(&m, row) + (long long)col * m.step;
            if (e->dtype == ST_F32 && m.step == 1) {
                memcpy(d, (const float *)buf + i, (size_t)run * 4);
            } else {
                for (long j = 0; j < run; j++) {
                    float x;
                    if (e->dtype == ST_F32)
                        memcpy(&x, (const char *)buf + 4 * (i + j), 4);
                    else {
                        uint16_t h;
                        memcpy(&h, (const char *)buf + 2 * (i + j), 2);
                        x = e->dtype == ST_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
                    }
                    d[j * m.step] = x;
                }
            }
            i += run;
        }
        done += n;
    }
    return 0;
}

/* Name j of tensor k of q (0: the first; 1..st_nalts: the alternatives). */
static void tensor_name(const gc_param_info *q, int j, long k, char *name, size_t len)
{
    const char *pre = j ? q->st_alts[2 * (j - 1)] : q->st_pre, *post = j ? q->st_alts[2 * j - 1] : q->st_post;
    if (q->st_layers)
        snprintf(name, len, "%s%ld%s", pre, k, post ? post : "");
    else
        snprintf(name, len, "%s", pre);
}

/* Tensor k of parameter q in sf: under each of its names in turn, each as
 * the graph says, else without its first dotted component (Hugging Face's
 * checkpoints of the base model: "transformer.h.0.ln_1.weight" saved as
 * "h.0.ln_1.weight"). name: the first name (for messages). */
static st_entry *find_tensor(st_file *sf, const gc_param_info *q, long k, char *name, size_t len)
{
    char buf[600];
    st_entry *e = NULL;
    for (int j = 0; !e && j <= q->st_nalts; j++) {
        tensor_name(q, j, k, buf, sizeof buf);
        e = st_find(sf, buf);
        const char *dot = strchr(buf, '.');
        if (!e && dot && dot[1])
            e = st_find(sf, dot + 1);
    }
    tensor_name(q, 0, k, name, len);
    return e;
}

int gcrt_st_load(float *params, const gc_program *p, const char *path, char *info, size_t infolen, char *err,
                 size_t errlen)
{
    st_file sf;
    if (st_open(&sf, path, err, errlen) != 0) {
        st_close(&sf);
        return -1;
    }
    char name[600];
    int rc = 0;
    /* every tensor the program wants, present, a parameter dtype, the right shape */
    long missing = 0;
    char first[700] = "";
    for (int i = 0; i < p->nparams && rc == 0; i++) {
        gc_param_info qi = effective(&p->params[i]);
        const gc_param_info *q = &qi;
        for (long k = 0; k < (q->st_layers ? q->st_layers : 1) && rc == 0; k++) {
            st_entry *e = find_tensor(&sf, q, k, name, sizeof name);
            if (!e) {
                char layer[48] = "", alt[160] = "";
                if (q->st_layers)
                    snprintf(layer, sizeof layer, ", layer %ld", k);
                if (q->st_nalts) {
                    char an[600];
                    tensor_name(q, 1, k, an, sizeof an);
                    snprintf(alt, sizeof alt, " nor '%.100s'%s", an, q->st_nalts > 1 ? " nor the others" : "");
                }
                if (!missing++)
                    snprintf(first, sizeof first, "'%.300s'%s (parameter '%.100s'%s, %.200s)", name, alt, q->name,
                             layer, q->st_where);
                continue;
            }
            if (e->dtype != ST_F32 && e->dtype != ST_BF16 && e->dtype != ST_F16)
                rc = fail(err, errlen, "%s: offset %lld: tensor '%s' is %s; parameters load from F32, BF16 or F16",
                          path, sf.data + e->begin, e->name, st_dtypes[e->dtype].name);
            else
                rc = check_shape(&sf, e, q, k, err, errlen);
        }
    }
    if (rc == 0 && missing)
        rc = fail(err, errlen, "%s: no tensor %s%s", path, first,
                  missing > 1 ? "; more are missing" : "");
    void *buf = rc == 0 ? malloc((size_t)CHUNK_ELEMS * 4) : NULL;
    if (rc == 0 && !buf)
        rc = fail(err, errlen, "%s: out of memory", path);
    if (rc == 0)
        memset(params, 0, (size_t)p->nparam_elems * sizeof *params);   /* what a stored corner leaves out */
    long nread = 0;
    for (int i = 0; i < p->nparams && rc == 0; i++) {
        gc_param_info qi = effective(&p->params[i]);
        const gc_param_info *q = &qi;
        for (long k = 0; k < (q->st_layers ? q->st_layers : 1) && rc == 0; k++) {
            long base = tensor_base(q, k, name, sizeof name);
            st_entry *e = find_tensor(&sf, q, k, name, sizeof name);
            rc = read_tensor(&sf, e, q, params + base, buf, err, errlen);
            e->used = 1;
            nread++;
        }
    }
    free(buf);
    if (rc == 0 && info) {
        long unused = 0;
        const char *ex = NULL;
        for (long i = 0; i < sf.n; i++)
            if (!sf.e[i].used && !unused++)
                ex = sf.e[i].name;
        if (unused)
            snprintf(info, infolen, "safetensors, %ld tensors read; %ld not parameters of this graph (e.g. '%.200s')",
                     nread, unused, ex);
        else
            snprintf(info, infolen, "safetensors, %ld tensors read", nread);
    }
    st_close(&sf);
    return rc;
}

/* ---------------------------------------------------------------- saving */

typedef struct {
    int fd;
    const char *path, *tmp;
    int failed;
    int err_no;
} st_out;

static void out_write(st_out *o, const void *p, size_t n)
{
    const char *b = p;
    while (!o->failed && n > 0) {
        ssize_t w = write(o->fd, b, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            o->failed = 1;
            o->err_no = w < 0 ? errno : EIO;
            return;
        }
        b += w, n -= (size_t)w;
    }
}

/* Writes tensor k of q from the parameter's part at src (fp32) as F32 or BF16. */
static void write_tensor(st_out *o, const gc_param_info *q, const float *src, int bf16, void *buf)
{
    elem_map m;
    map_init(&m, q);
    long long total = (long long)m.rows * m.rowlen;
    for (long long done = 0; done < total && !o->failed;) {
        long n = total - done < CHUNK_ELEMS ? (long)(total - done) : CHUNK_ELEMS;
        for (long i = 0; i < n;) {
            long long el = done + i;
            long row = (long)(el / m.rowlen), col = (long)(el % m.rowlen);
            long run = m.rowlen - col < n - i ? m.rowlen - col : n - i;
            const float *s = src + map_row(&m, row) + (long long)col * m.step;
            for (long j = 0; j < run; j++) {
                if (bf16) {
                    uint16_t h = f32_to_bf16(s[j * m.step]);
                    memcpy((char *)buf + 2 * (i + j), &h, 2);
                } else {
                    memcpy((char *)buf + 4 * (i + j), &s[j * m.step], 4);
                }
            }
            i += run;
        }
        out_write(o, buf, (size_t)n * (bf16 ? 2 : 4));
        done += n;
    }
}

/* The header: "__metadata__" first, then every tensor in parameter order,
 * data laid out in the same order; padded with spaces to a multiple of 8
 * (as Hugging Face's writer does). NULL when out of memory. */
static char *make_header(const gc_program *p, int bf16, size_t *len)
{
    json_t *root = json_object(), *meta = json_object();
    json_object_set_new(meta, "format", json_string("pt"));
    json_object_set_new(meta, "producer", json_string("gcompile"));
    json_object_set_new(meta, "graph", json_string(p->graph_file ? p->graph_file : ""));
    json_object_set_new(root, "__metadata__", meta);
    long long at = 0;
    char name[600];
    for (int i = 0; i < p->nparams; i++) {
        gc_param_info qi = effective(&p->params[i]);
        const gc_param_info *q = &qi;
        long long n = 1;
        for (int k = 0; k < q->st_rank; k++)
            n *= q->st_shape[k];
        for (long k = 0; k < (q->st_layers ? q->st_layers : 1); k++) {
            tensor_base(q, k, name, sizeof name);
            json_t *t = json_object(), *shape = json_array(), *offs = json_array();
            for (int d = 0; d < q->st_rank; d++)
                json_array_append_new(shape, json_integer(q->st_shape[d]));
            json_array_append_new(offs, json_integer(at));
            at += n * (bf16 ? 2 : 4);
            json_array_append_new(offs, json_integer(at));
            json_object_set_new(t, "dtype", json_string(bf16 ? "BF16" : "F32"));
            json_object_set_new(t, "shape", shape);
            json_object_set_new(t, "data_offsets", offs);
            json_object_set_new(root, name, t);
        }
    }
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!s)
        return NULL;
    size_t n = strlen(s), padded = (n + 7) & ~(size_t)7;
    char *h = malloc(padded + 1);
    if (h) {
        memcpy(h, s, n);
        memset(h + n, ' ', padded - n);
        h[padded] = '\0';
        *len = padded;
    }
    free(s);
    return h;
}

static void sync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int gcrt_st_save(const char *path, const gc_program *p, const float *params, int bf16, char *err, size_t errlen)
{
    size_t hlen = 0;
    char *header = make_header(p, bf16, &hlen);
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    void *buf = malloc((size_t)CHUNK_ELEMS * 4);
    if (!header || !tmp || !buf) {
        free(header), free(tmp), free(buf);
        return fail(err, errlen, "%s: out of memory", path);
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    st_out o = {.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644), .path = path, .tmp = tmp};
    if (o.fd < 0) {
        fail(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(header), free(tmp), free(buf);
        return -1;
    }
    unsigned char h8[8];
    for (int i = 0; i < 8; i++)
        h8[i] = (unsigned char)((unsigned long long)hlen >> (8 * i));
    out_write(&o, h8, 8);
    out_write(&o, header, hlen);
    char name[600];
    for (int i = 0; i < p->nparams && !o.failed; i++) {
        gc_param_info qi = effective(&p->params[i]);
        const gc_param_info *q = &qi;
        for (long k = 0; k < (q->st_layers ? q->st_layers : 1) && !o.failed; k++)
            write_tensor(&o, q, params + tensor_base(q, k, name, sizeof name), bf16, buf);
    }
    if (!o.failed && fsync(o.fd) != 0)
        o.failed = 1, o.err_no = errno;
    if (close(o.fd) != 0 && !o.failed)
        o.failed = 1, o.err_no = errno;
    if (!o.failed && rename(tmp, path) != 0)
        o.failed = 1, o.err_no = errno;
    int rc = 0;
    if (o.failed) {
        unlink(tmp);
        rc = fail(err, errlen, "%s: cannot write: %s", path, strerror(o.err_no));
    } else {
        sync_parent(path);
    }
    free(header), free(tmp), free(buf);
    return rc;
}

/* ---------------------------------------------------------------- which format */

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

int gcrt_st_is_save_path(const char *path)
{
    return ends_with(path, ".safetensors");
}

int gcrt_st_is_file(const char *path)
{
    if (ends_with(path, ".safetensors"))
        return 1;
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0)
        return 0;
    struct stat st;
    unsigned char h[9];
    int yes = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && read(fd, h, 9) == 9) {
        unsigned long long n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | h[i];
        yes = n >= 2 && n <= (unsigned long long)ST_MAX_HEADER && h[8] == '{';
    }
    close(fd);
    return yes;
}
