/* sweep.c — --emit budget-sweep: the memory/time trade-off. The budget
 * search (search.c) runs at SWEEP_POINTS budgets evenly spaced from the
 * smallest plan it can find to the unconstrained plan (the least predicted
 * time at any budget); per budget, the chosen micro-batch count, recompute
 * modes and offload, the planned peak and the predicted step time. Text, or
 * an SVG plot when the output file ends in .svg.
 */
#include <stdlib.h>
#include <string.h>

#include "driver.h"
#include "frontend.h"

#define SWEEP_POINTS 20

typedef struct Row {
    size_t budget, peak;
    int K, offload;
    char *modes;
    double seconds;
} Row;

typedef struct Sweep {
    const DriverOptions *o;
    Row rows[SWEEP_POINTS];
    int n;
    int nlayers;
} Sweep;

/* "none", "full", or "45 full, 3 selective" */
static void describe(char *buf, size_t len, const char *modes)
{
    static const char *const names[] = {"full", "selective", "none"};
    static const char letters[] = "fsn";
    int n[3] = {0, 0, 0}, kinds = 0;
    for (const char *p = modes; *p; p++)
        n[strchr(letters, *p) - letters]++;
    for (int i = 0; i < 3; i++)
        kinds += n[i] > 0;
    buf[0] = '\0';
    if (kinds <= 1) {
        snprintf(buf, len, "%s", n[0] ? "full" : n[1] ? "selective" : "none");
        return;
    }
    size_t used = 0;
    for (int i = 0; i < 3 && used < len; i++)
        if (n[i])
            used += (size_t)snprintf(buf + used, len - used, "%s%d %s", used ? ", " : "", n[i], names[i]);
}

static int put_text(FILE *f, const void *arg)
{
    const Sweep *w = arg;
    const DriverOptions *o = w->o;
    fprintf(f, "budget sweep: %s%s%s, target %s, device %s: %d budgets from the smallest plan to the unconstrained "
               "one; each the least predicted time that fits (planned and checked)\n",
            o->input, o->build.config ? " --config " : "", o->build.config ? o->build.config : "", o->emit.target,
            o->emit.device, w->n);
    fprintf(f, "%12s %14s %12s %4s  %-28s %-8s %13s  %s\n", "budget", "(bytes)", "peak", "K", "recompute (layers)",
            "offload", "predicted ms", "per layer");
    for (int i = 0; i < w->n; i++) {
        const Row *r = &w->rows[i];
        char b[32], p[32], d[64];
        describe(d, sizeof d, r->modes);
        fprintf(f, "%12s %14zu %12s %4d  %-28s %-8s %13.3f  %s\n", human_bytes(b, sizeof b, (double)r->budget), r->budget,
                human_bytes(p, sizeof p, (double)r->peak), r->K, d, offload_name(r->offload), r->seconds * 1e3, r->modes);
    }
    return ferror(f) ? -1 : 0;
}

/* the SVG plot: predicted ms/step over the budget (GiB), a step line */
static int put_svg(FILE *f, const void *arg)
{
    const Sweep *w = arg;
    const double W = 760, H = 420, L = 80, R = 20, T = 40, B = 60;
    double top = (double)w->rows[w->n - 1].budget, GiB = 1073741824.0;   /* the axis unit */
    const char *unit = "GiB";
    if (top < GiB)
        GiB = top < 1048576.0 ? 1024.0 : 1048576.0, unit = top < 1048576.0 ? "KiB" : "MiB";
    double x0 = (double)w->rows[0].budget / GiB, x1 = top / GiB;
    double y0 = 1e300, y1 = 0;
    for (int i = 0; i < w->n; i++) {
        double y = w->rows[i].seconds * 1e3;
        y0 = y < y0 ? y : y0;
        y1 = y > y1 ? y : y1;
    }
    if (x1 <= x0)
        x1 = x0 + 1;
    double pad = (y1 - y0) * 0.1 + 1e-3;
    y0 -= pad, y1 += pad;
    #define X(v) (L + ((v) - x0) / (x1 - x0) * (W - L - R))
    #define Y(v) (H - B - ((v) - y0) / (y1 - y0) * (H - T - B))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n", W, H);
    fprintf(f, "<title>budget sweep: %s</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", w->o->input);
    fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"14\">predicted step time vs memory budget (%s, %s, %s)</text>\n",
            L, w->o->build.config ? w->o->build.config : w->o->input, w->o->emit.target, w->o->emit.device);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T, L, H - B);
    for (int i = 0; i <= 4; i++) {   /* ticks */
        double xv = x0 + (x1 - x0) * i / 4, yv = y0 + (y1 - y0) * i / 4;
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.2f</text>\n", X(xv), H - B + 18, xv);
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.1f</text>\n", L - 6, Y(yv) + 4, yv);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">budget (%s)</text>\n", (L + W - R) / 2, H - 18, unit);
    fprintf(f, "<text x=\"18\" y=\"%.0f\" transform=\"rotate(-90 18 %.0f)\" text-anchor=\"middle\">predicted ms/step"
               "</text>\n", (T + H - B) / 2, (T + H - B) / 2);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"");
    for (int i = 0; i < w->n; i++) {   /* a step line: the time holds until the next budget */
        double x = (double)w->rows[i].budget / GiB, y = w->rows[i].seconds * 1e3;
        if (i)
            fprintf(f, " %.1f,%.1f", X(x), Y(w->rows[i - 1].seconds * 1e3));
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", X(x), Y(y));
    }
    fprintf(f, "\"/>\n");
    for (int i = 0; i < w->n; i++) {
        const Row *r = &w->rows[i];
        char b[32], p[32], d[64];
        describe(d, sizeof d, r->modes);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\" stroke=\"%s\" stroke-width=\"2\"><title>budget %s: "
                   "peak %s, K=%d, recompute %s, offload %s, %.3f ms/step</title></circle>\n",
                X((double)r->budget / GiB), Y(r->seconds * 1e3), r->K > 1 ? "#d62728" : "#1f77b4",
                r->offload ? "#2ca02c" : "none", human_bytes(b, sizeof b, (double)r->budget),
                human_bytes(p, sizeof p, (double)r->peak), r->K, d, offload_name(r->offload), r->seconds * 1e3);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\">red: more than one micro-batch</text>\n", W - R - 200, T);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#2ca02c\">green ring: offload to host memory</text>\n", W - R - 200,
            T + 16);
    fprintf(f, "</svg>\n");
    #undef X
    #undef Y
    return ferror(f) ? -1 : 0;
}

static int put_sweep(FILE *f, const void *arg)
{
    const Sweep *w = arg;
    const char *out = w->o->output;
    size_t n = out ? strlen(out) : 0;
    return n > 4 && !strcmp(out + n - 4, ".svg") ? put_svg(f, arg) : put_text(f, arg);
}

int driver_budget_sweep(Ast *ast, DriverOptions *o)
{
    if (o->recompute >= 0 || o->rc_layers || o->micro_batches || o->gpus > 1) {
        fprintf(stderr, "gcompile: error: --emit budget-sweep chooses micro-batches and recompute itself: drop "
                        "--recompute, --micro-batches (and --gpus: not with a split yet)\n");
        return 1;
    }
    Search *s = search_open(ast, o);
    if (!s)
        return 1;
    Sweep w = {.o = o};
    SearchPick p = {0};
    int rc = search_run(s, 1, &p);              /* nothing fits a byte: the smallest plan */
    size_t lo = p.peak;
    if (rc == 1)
        rc = search_run(s, (size_t)-1, &p);     /* everything fits: the fastest plan */
    size_t hi = p.peak;
    for (int i = 0; i < SWEEP_POINTS && rc == 0; i++) {
        size_t b = i == SWEEP_POINTS - 1 ? hi : lo + (size_t)((double)(hi - lo) * i / (SWEEP_POINTS - 1));
        if (i && b <= w.rows[w.n - 1].budget)
            continue;                          /* lo == hi: one point */
        rc = search_run(s, b, &p);
        if (rc == 0)
            w.rows[w.n++] = (Row){b, p.peak, p.K, p.offload, xstrdup(p.modes), p.seconds};
    }
    if (rc == 1)
        fprintf(stderr, "gcompile: internal error: budget-sweep: the smallest plan's budget did not fit\n");
    search_close(s);
    if (rc == 0) {
        if (!o->emit.device)
            o->emit.device = o->device ? o->device : !strcmp(o->emit.target, "cuda") ? "h100" : "cpu";
        rc = driver_write(o->output, put_sweep, &w);
    }
    for (int i = 0; i < w.n; i++)
        free(w.rows[i].modes);
    return rc ? 1 : 0;
}
