/* plan_html.c — the plan explorer (--emit plan-html) and the comparison of
 * two plans (--emit plan-diff) as self-contained web pages. The pages are
 * ordinary files under codegen/web/, embedded by cmake/embed.cmake; a page
 * template holds three markers that are replaced here:
 *   <!--@css-->   explorer.css inside <style>
 *   <!--@data-->  the plan JSON inside <script type="application/json" id="gc-data">
 *   <!--@js-->    common.js and the page's script inside <script>
 * Nothing is fetched: the file opens offline in any browser. */
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

typedef struct Asset { const unsigned char *bytes; size_t len; } Asset;

#define ASSET(n) ((Asset){gc_web_##n, gc_web_##n##_len})

static void put_asset(FILE *f, Asset a, const char *end_tag)
{
    /* the embedded text must not close its own element early */
    if (strstr((const char *)a.bytes, end_tag))
        IR_BUG("embedded web file contains %s", end_tag);
    fwrite(a.bytes, 1, a.len, f);
}

/* JSON text inside <script>: '<' as \u003c (it only occurs inside strings),
 * so no "</script>" or "<!--" can appear. */
static int put_json(FILE *f, json_t *data)
{
    char *s = json_dumps(data, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (!s)
        return -1;
    for (const char *p = s; *p; p++) {
        const char *q = strchr(p, '<');
        if (!q) {
            fputs(p, f);
            break;
        }
        fwrite(p, 1, (size_t)(q - p), f);
        fputs("\\u003c", f);
        p = q;
    }
    free(s);
    return 0;
}

/* Writes template tmpl with its markers replaced. */
static int put_page(FILE *f, Asset tmpl, Asset script, json_t *data)
{
    const char *p = (const char *)tmpl.bytes;
    for (;;) {
        const char *m = strstr(p, "<!--@");
        if (!m) {
            fputs(p, f);
            break;
        }
        fwrite(p, 1, (size_t)(m - p), f);
        if (!strncmp(m, "<!--@css-->", 11)) {
            fputs("<style>\n", f);
            put_asset(f, ASSET(explorer_css), "</style");
            fputs("</style>", f);
            p = m + 11;
        } else if (!strncmp(m, "<!--@js-->", 10)) {
            fputs("<script>\n", f);
            put_asset(f, ASSET(common_js), "</script");
            put_asset(f, script, "</script");
            fputs("</script>", f);
            p = m + 10;
        } else if (!strncmp(m, "<!--@data-->", 12)) {
            fputs("<script type=\"application/json\" id=\"gc-data\">", f);
            if (put_json(f, data))
                return -1;
            fputs("</script>", f);
            p = m + 12;
        } else
            IR_BUG("unknown marker in a page template: %.20s", m);
    }
    return ferror(f) ? -1 : 0;
}

int emit_plan_html(FILE *f, const Graph *g, const EmitOptions *opt)
{
    json_t *plan = plan_json(g, opt);
    int rc = put_page(f, ASSET(plan_html), ASSET(plan_js), plan);
    json_decref(plan);
    return rc;
}

int emit_plan_diff(FILE *f, json_t *a, const char *name_a, json_t *b, const char *name_b)
{
    json_t *d = json_object();
    json_object_set(d, "a", a);
    json_object_set(d, "b", b);
    json_object_set_new(d, "name_a", json_string(name_a));
    json_object_set_new(d, "name_b", json_string(name_b));
    int rc = put_page(f, ASSET(diff_html), ASSET(diff_js), d);
    json_decref(d);
    return rc;
}

/* ------------------------------------------------------------ plan checks */

/* Field `key` of o as an integer in [lo, hi] (null allowed when nullable);
 * 0, or -1 after writing "where.key ..." into err. */
static int want_int(const json_t *o, const char *where, const char *key, long long lo, long long hi,
                    int nullable, char *err, size_t n)
{
    const json_t *v = json_object_get(o, key);
    if (nullable && json_is_null(v))
        return 0;
    if (!json_is_integer(v)) {
        snprintf(err, n, "%s.%s is not an integer%s", where, key, nullable ? " or null" : "");
        return -1;
    }
    long long x = json_integer_value(v);
    if (x < lo || x > hi) {
        snprintf(err, n, "%s.%s = %lld is out of range [%lld, %lld]", where, key, x, lo, hi);
        return -1;
    }
    return 0;
}

static int want_str(const json_t *o, const char *where, const char *key, char *err, size_t n)
{
    if (json_is_string(json_object_get(o, key)))
        return 0;
    snprintf(err, n, "%s.%s is not a string", where, key);
    return -1;
}

static int check_ids(const json_t *o, const char *where, const char *key, long long nt, char *err,
                     size_t n)
{
    const json_t *a = json_object_get(o, key);
    if (!json_is_array(a)) {
        snprintf(err, n, "%s.%s is not an array", where, key);
        return -1;
    }
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= nt) {
            snprintf(err, n, "%s.%s[%zu] is not a tensor id", where, key, i);
            return -1;
        }
    }
    return 0;
}

static int check_tensor(const json_t *t, size_t i, long long nt, long long ns, char *err, size_t n)
{
    char w[48];
    snprintf(w, sizeof w, "tensors[%zu]", i);
    if (!json_is_object(t)) {
        snprintf(err, n, "%s is not an object", w);
        return -1;
    }
    return want_int(t, w, "id", (long long)i, (long long)i, 0, err, n) ||
           want_str(t, w, "name", err, n) || want_str(t, w, "kind", err, n) ||
           want_str(t, w, "region", err, n) ||
           want_int(t, w, "bytes", 0, (long long)1 << 60, 0, err, n) ||
           want_int(t, w, "offset", 0, (long long)1 << 60, 0, err, n) ||
           want_int(t, w, "first", 0, ns - 1, 1, err, n) ||
           want_int(t, w, "last", 0, ns - 1, 1, err, n) ||
           want_int(t, w, "inplace_of", 0, nt - 1, 1, err, n) ||
           want_int(t, w, "view_of", 0, nt - 1, 1, err, n);
}

static int check_plan(const json_t *p, char *err, size_t n)
{
    if (!json_is_object(p)) {
        snprintf(err, n, "not a gcompile plan (the top level is not an object)");
        return -1;
    }
    if (want_int(p, "plan", "version", 1, 1, 0, err, n) || want_str(p, "plan", "graph", err, n))
        return -1;
    const json_t *ts = json_object_get(p, "tensors"), *ss = json_object_get(p, "schedule"),
                 *rs = json_object_get(p, "regions");
    if (!json_is_array(ts) || !json_is_array(ss) || !json_is_array(rs)) {
        snprintf(err, n, "plan.%s is not an array",
                 !json_is_array(ts) ? "tensors" : !json_is_array(ss) ? "schedule" : "regions");
        return -1;
    }
    long long nt = (long long)json_array_size(ts), ns = (long long)json_array_size(ss);
    for (size_t i = 0; i < (size_t)nt; i++)
        if (check_tensor(json_array_get(ts, i), i, nt, ns, err, n))
            return -1;
    for (size_t i = 0; i < (size_t)ns; i++) {
        const json_t *s = json_array_get(ss, i);
        char w[48];
        snprintf(w, sizeof w, "schedule[%zu]", i);
        if (!json_is_object(s)) {
            snprintf(err, n, "%s is not an object", w);
            return -1;
        }
        if (want_int(s, w, "step", (long long)i, (long long)i, 0, err, n) ||
            want_str(s, w, "op", err, n) || want_str(s, w, "name", err, n) ||
            want_str(s, w, "phase", err, n) || check_ids(s, w, "inputs", nt, err, n) ||
            check_ids(s, w, "outputs", nt, err, n))
            return -1;
    }
    for (size_t i = 0; i < json_array_size(rs); i++) {
        const json_t *r = json_array_get(rs, i);
        char w[48];
        snprintf(w, sizeof w, "regions[%zu]", i);
        if (!json_is_object(r)) {
            snprintf(err, n, "%s is not an object", w);
            return -1;
        }
        if (want_str(r, w, "name", err, n) || want_int(r, w, "bytes", 0, (long long)1 << 60, 0, err, n))
            return -1;
    }
    return 0;
}

/* A plan JSON file plan-diff reads is at most this many bytes (GPT-2 1.5B's is
 * far below it). */
#define PLAN_FILE_LIMIT ((size_t)1 << 30)

json_t *plan_diff_load(const char *path, char *err, size_t n)
{
    json_error_t je;
    size_t len;
    char *text = read_regular_file(path, PLAN_FILE_LIMIT, &len, err, n);   /* no FIFO waited on, no /dev/zero read */
    if (!text)
        return NULL;
    json_t *p = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!p) {
        if (je.line > 0)
            snprintf(err, n, "%s:%d:%d: malformed JSON: %s", path, je.line, je.column, je.text);
        else
            snprintf(err, n, "%s: %s", path, je.text);
        return NULL;
    }
    char why[256];
    if (check_plan(p, why, sizeof why)) {
        snprintf(err, n, "%s: not a gcompile plan: %s", path, why);
        json_decref(p);
        return NULL;
    }
    return p;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static const char *str_or(const json_t *o, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : dflt;
}

/* The names of the parameter storage tensors ({name: true}). */
static json_t *param_names(const json_t *p)
{
    json_t *set = json_object();
    json_t *ts = json_object_get(p, "tensors"), *t;
    size_t i;
    json_array_foreach(ts, i, t) {
        if (!strcmp(str_or(t, "kind", ""), "param") && json_is_null(json_object_get(t, "view_of")))
            json_object_set_new(set, str_or(t, "name", ""), json_true());
    }
    return set;
}

/* The first name of set a missing from set b, or NULL. */
static const char *missing(const json_t *a, const json_t *b)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)a, k, v)
        if (!json_object_get(b, k))
            return k;
    return NULL;
}

int plan_diff_check(const json_t *a, const json_t *b, char *err, size_t n)
{
    const char *ga = base_name(str_or(a, "graph", "")), *gb = base_name(str_or(b, "graph", ""));
    const char *ca = str_or(a, "config", ""), *cb = str_or(b, "config", "");
    if (strcmp(ga, gb)) {
        snprintf(err, n, "graph '%s' vs graph '%s'", ga, gb);
        return -1;
    }
    if (strcmp(ca, cb)) {
        snprintf(err, n, "config '%s' vs config '%s'", *ca ? ca : "(none)", *cb ? cb : "(none)");
        return -1;
    }
    json_t *pa = param_names(a), *pb = param_names(b);
    const char *ma = missing(pa, pb), *mb = missing(pb, pa);
    int rc = 0;
    if (ma || mb) {
        snprintf(err, n, "parameter '%s' is only in the %s plan", ma ? ma : mb, ma ? "first" : "second");
        rc = -1;
    }
    json_decref(pa);
    json_decref(pb);
    return rc;
}
