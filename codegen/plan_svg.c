/* plan_svg.c — --emit plan-svg: the arena as a picture. x = schedule step,
 * y = byte offset (0 at the bottom); one rectangle per arena storage tensor
 * from its first step to its last, coloured by kind, with a tooltip. A strip
 * above shows each step's phase; a dashed line marks the lower bound, a red
 * one the peak step; a bar on the right shows the device regions to scale,
 * and under it the host region (passes/offload.c), which is not device
 * memory. */
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

#define ALIGN 256
enum { PX = 90, PY = 60, PW = 1100, PH = 620, BARX = PX + PW + 110, BARW = 60, WIDTH = 1500,
       HEIGHT = PY + PH + 150 };

static const char *const kind_color[] = {
    "#e15759", "#76b7b2", "#edc948", "#4e79a7", "#f28e2b", "#59a14f", "#9c755f", "#b07aa1"};
static const char *const phase_color[] = {"#4e79a7", "#f28e2b", "#e15759", "#59a14f",
                                          "#b07aa1"};
static const char *const params_color = "#bab0ac";   /* run-once casts and copies (op_phase_label "params") */
static const char *const region_color[] = {"#e15759", "#76b7b2", "#edc948", "#4e79a7", "#ff9da7"};   /* host: not a kind's colour */


static const char *human(double v, char *buf, size_t len)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, len, !u ? "%.0f %s" : v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, units[u]);
    return buf;
}

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++)
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default: fputc(*s, f);
        }
}


/* A "nice" tick step (1, 2 or 5 times a power of ten or of 1024) near span/n. */
static double tick(double span, int n, int bytes)
{
    double raw = span / n, base = 1;
    if (bytes)
        while (base * 1024 <= raw)
            base *= 1024;
    while (base * 10 <= raw)
        base *= 10;
    for (;;) {
        if (base >= raw) return base;
        if (2 * base >= raw) return 2 * base;
        if (5 * base >= raw) return 5 * base;
        base *= 10;
    }
}

static void axes(FILE *f, const Graph *g, double ymax)
{
    char h[32];
    fprintf(f, "<g font-size=\"11\" fill=\"#333\">\n");
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
            "stroke=\"#333\"/>\n", PX, PY, PW, PH);
    double xs = tick(g->nsched > 0 ? g->nsched : 1, 10, 0);
    for (double s = 0; s <= g->nsched; s += xs) {
        double x = PX + PW * s / (g->nsched > 0 ? g->nsched : 1);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.0f</text>\n",
                x, PY + PH, x, PY + PH + 5, x, PY + PH + 18, s);
    }
    double ys = tick(ymax, 8, 1);
    for (double b = 0; b <= ymax * 1.0001; b += ys) {
        double y = PY + PH - PH * b / ymax;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#333\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                PX - 5, y, PX, y, PX - 8, y + 4, human(b, h, sizeof h));
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"13\">schedule step"
            "</text>\n", PX + PW / 2, PY + PH + 38);
    fprintf(f, "<text transform=\"translate(%d,%d) rotate(-90)\" text-anchor=\"middle\" "
            "font-size=\"13\">arena offset</text>\n</g>\n", 22, PY + PH / 2);
}

static void phases(FILE *f, const Graph *g)
{
    if (g->nsched == 0)
        return;
    fprintf(f, "<g>\n");
    int s0 = 0;
    for (int s = 1; s <= g->nsched; s++) {
        const Op *op = &g->ops[g->sched[s0]];
        const char *label = op_phase_label(g, op);
        if (s < g->nsched && strcmp(op_phase_label(g, &g->ops[g->sched[s]]), label) == 0)
            continue;
        double x0 = PX + (double)PW * s0 / g->nsched, x1 = PX + (double)PW * s / g->nsched;
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"8\" fill=\"%s\">"
                "<title>%s: steps %d-%d</title></rect>\n", x0, PY - 12, x1 - x0,
                op_param_refresh(g, op) ? params_color : phase_color[op->phase], label, s0, s - 1);
        s0 = s;
    }
    fprintf(f, "</g>\n");
}

static void tensors(FILE *f, const Graph *g, const char *handed, double ymax)
{
    char h[32];
    double sx = g->nsched > 0 ? (double)PW / g->nsched : 0, sy = PH / ymax;
    fprintf(f, "<g stroke=\"#fff\" stroke-width=\"0.3\">\n");
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        if (t->view_of >= 0 || t->region != RG_ARENA || t->first < 0)
            continue;
        int end = t->last + 1 - (handed[i] && t->last > t->first);
        double hgt = (double)t->bytes * sy;
        fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"%s>"
                "<title>", PX + t->first * sx, PY + PH - (double)(t->offset + t->bytes) * sy,
                (end - t->first) * sx, hgt < 0.4 ? 0.4 : hgt, kind_color[t->kind],
                hgt < 3 ? " stroke=\"none\"" : "");
        xml_text(f, t->name);
        fprintf(f, " (%s) %s, %zu bytes at %zu, steps %d-%d", tensor_kind_name(t->kind),
                human((double)t->bytes, h, sizeof h), t->bytes, t->offset, t->first, t->last);
        if (t->inplace_of >= 0) {
            fputs(", in place of ", f);
            xml_text(f, g->t[t->inplace_of].name);
        }
        fprintf(f, "</title></rect>\n");
    }
    fprintf(f, "</g>\n");
}

static void marks(FILE *f, const Graph *g, int peak, double ymax)
{
    char h[32];
    size_t lb = g->region_lower_bound[RG_ARENA];
    double y = PY + PH - PH * (double)lb / ymax;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#000\" "
            "stroke-dasharray=\"6,4\"/><text x=\"%d\" y=\"%.1f\" font-size=\"11\">"
            "lower bound<tspan x=\"%d\" dy=\"12\">%s</tspan></text>\n", PX, y, PX + PW, y,
            PX + PW + 4, y + 2, PX + PW + 4, human((double)lb, h, sizeof h));
    if (peak < 0)
        return;
    double x = PX + (peak + 0.5) * (double)PW / g->nsched;
    const Op *op = &g->ops[g->sched[peak]];
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d00\" "
            "stroke-width=\"1.2\"/><text x=\"%.1f\" y=\"%d\" font-size=\"11\" fill=\"#d00\" "
            "text-anchor=\"middle\">peak: step %d (", x, PY - 14, x, PY + PH, x, PY - 18, peak);
    xml_text(f, op->name);
    fputs(")</text>\n", f);
}

/* The device regions stacked to scale (the device allocation); the host
 * region, when there is one, named under it. */
static void region_bar(FILE *f, const Graph *g)
{
    char h[32];
    double total = (double)graph_device_bytes(g);
    if (total <= 0)
        return;
    double y = PY + PH;
    fprintf(f, "<g font-size=\"11\">\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">device "
            "regions</text>\n", BARX + BARW / 2, PY - 4);
    if (g->region_bytes[RG_HOST])
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"10\" fill=\"%s\"><title>host: %zu bytes (not "
                "device memory)</title></rect><text x=\"%d\" y=\"%d\" text-anchor=\"middle\">+ host %s</text>\n",
                BARX, PY + PH + 24, BARW, region_color[RG_HOST], g->region_bytes[RG_HOST], BARX + BARW / 2,
                PY + PH + 46, human((double)g->region_bytes[RG_HOST], h, sizeof h));
    for (int r = 0; r < RG_COUNT; r++) {
        if (!region_on_device((Region)r))
            continue;
        double hgt = PH * (double)g->region_bytes[r] / total;
        y -= hgt;
        fprintf(f, "<rect x=\"%d\" y=\"%.2f\" width=\"%d\" height=\"%.2f\" fill=\"%s\" "
                "stroke=\"#fff\"><title>%s: %zu bytes</title></rect>\n", BARX, y, BARW, hgt,
                region_color[r], region_name((Region)r), g->region_bytes[r]);
        if (hgt > 12)
            fprintf(f, "<text x=\"%d\" y=\"%.1f\">%s</text><text x=\"%d\" y=\"%.1f\">%s</text>\n",
                    BARX + BARW + 4, y + hgt / 2, region_name((Region)r), BARX + BARW + 4,
                    y + hgt / 2 + 12, human((double)g->region_bytes[r], h, sizeof h));
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">%s</text>\n</g>\n",
            BARX + BARW / 2, PY + PH + 18, human(total, h, sizeof h));
}

static void legend(FILE *f)
{
    fprintf(f, "<g font-size=\"12\">\n");
    int x = PX;
    /* the kinds an arena can hold (gradients too, under the fused-opt schedule) */
    static const TensorKind kinds[] = {TK_ACTIVATION, TK_ACTGRAD, TK_GRAD, TK_INPUT, TK_WORKSPACE, TK_COMM};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++, x += 120) {
        int k = kinds[i];
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">%s</text>\n", x, PY + PH + 60, kind_color[k], x + 16,
                PY + PH + 71, tensor_kind_name((TensorKind)k));
    }
    x = PX;
    for (int p = PH_FWD; p <= PH_COMM; p++, x += 150)
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"6\" fill=\"%s\"/>"
                "<text x=\"%d\" y=\"%d\">phase %s</text>\n", x, PY + PH + 87, phase_color[p],
                x + 16, PY + PH + 94, phase_name((Phase)p));
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"6\" fill=\"%s\"/>"
            "<text x=\"%d\" y=\"%d\">phase params (weight casts and copies run once, not per step)</text>\n", x, PY + PH + 87,
            params_color, x + 16, PY + PH + 94);
    fprintf(f, "</g>\n");
}

void emit_plan_svg(FILE *f, const Graph *g, const EmitOptions *opt)
{
    char h1[32], h2[32];
    char *handed = calloc((size_t)g->nt + 1, 1);
    if (!handed)
        IR_BUG("out of memory");
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].inplace_of >= 0)
            handed[g->t[i].inplace_of] = 1;
    size_t arena = g->region_bytes[RG_ARENA], lb = g->region_lower_bound[RG_ARENA];
    double ymax = (double)(arena > lb ? arena : lb);
    if (ymax <= 0)
        ymax = ALIGN;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/"
            "svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", WIDTH, HEIGHT, WIDTH,
            HEIGHT);
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"15\">", PX);
    xml_text(f, g->file ? g->file : "-");
    if (g->config && *g->config)
        fprintf(f, " (%s)", g->config);
    fprintf(f, " — arena %s, lower bound %s (%.4fx), schedule %s, target %s%s</text>\n",
            human((double)arena, h1, sizeof h1), human((double)lb, h2, sizeof h2),
            lb ? (double)arena / (double)lb : 1.0,
            g->schedule_name && *g->schedule_name ? g->schedule_name : "-",
            opt && opt->target ? opt->target : "cpu", g->no_reuse ? ", --no-reuse" : "");
    if (g->nranks > 1)
        fprintf(f, "<text x=\"%d\" y=\"38\" font-size=\"12\">split %s over %d ranks: one rank's plan; %s sent "
                "per rank per step</text>\n", PX, g->split_name, g->nranks, human(g->comm_bytes, h1, sizeof h1));
    phases(f, g);
    tensors(f, g, handed, ymax);
    axes(f, g, ymax);
    marks(f, g, plan_arena_peak(g, NULL), ymax);
    region_bar(f, g);
    legend(f);
    fprintf(f, "</svg>\n");
    free(handed);
}
