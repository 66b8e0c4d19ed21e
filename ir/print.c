/* print.c — the readable IR (--emit ir) and the summary (--emit summary). */
#include <string.h>

#include "ir.h"

static void print_shape(FILE *f, const Tensor *t)
{
    fprintf(f, "%s[", dtype_name(t->dtype));
    for (int i = 0; i < t->rank; i++)
        fprintf(f, "%s%ld", i ? "," : "", t->shape[i]);
    fputc(']', f);
}

static void print_tensor_ref(FILE *f, const Graph *g, int id)
{
    fprintf(f, "%%%d:%s", id, g->t[id].name);
}

/* attributes in ops.def order: "tb=1", "eps=1e-05", "shape=[4,64,3]" */
static void print_attrs(FILE *f, const Op *op)
{
    const char *s = op_info[op->kind].attrs;
    int j = 0;
    while (*s) {
        int list = *s == '[';
        s += list || *s == '#';
        size_t len = strcspn(s, ",=");
        fprintf(f, "%s%.*s=", op->nin || j ? ", " : "", (int)len, s);
        if (list) {
            fputc('[', f);
            for (int i = 0; i < op->nlist; i++)
                fprintf(f, "%s%ld", i ? "," : "", op->list[i]);
            fputc(']', f);
        } else {
            fprintf(f, "%.9g", op->attr[j]);
        }
        j++;
        s += strcspn(s, ",");
        if (*s == ',')
            s++;
    }
}

static const char *init_name(InitKind k)
{
    static const char *const n[] = {"", "zeros", "ones", "normal"};
    return n[k];
}

void ir_print(FILE *f, const Graph *g)
{
    fprintf(f, "# gcompile IR of %s%s%s\n", g->file, g->config[0] ? ", config " : "", g->config);
    fprintf(f, "dims:");
    for (int i = 0; i < g->ndims; i++)
        fprintf(f, " %s=%ld", g->dims[i].name, g->dims[i].value);
    fprintf(f, "\n\ntensors (%d):\n", g->nt);
    const ParamSource **src = psrc_table(g);
    for (int i = 0; i < g->nt; i++) {
        const Tensor *t = &g->t[i];
        fprintf(f, "  %%%d %s: ", i, t->name);
        print_shape(f, t);
        fprintf(f, " %s", tensor_kind_name(t->kind));
        if (t->kind == TK_PARAM && t->view_of < 0) {
            fprintf(f, " init=%s", init_name(t->init));
            if (t->init == INIT_NORMAL)
                fprintf(f, "(%.9g)", t->init_std);
            if (!t->decay)
                fprintf(f, " nodecay");
            psrc_print(f, src[i]);
        }
        if (t->view_of >= 0)
            fprintf(f, " view_of=%%%d+%zu", t->view_of, t->view_offset);
        if (t->grad >= 0)
            fprintf(f, " grad=%%%d", t->grad);
        fputc('\n', f);
    }
    free(src);
    fprintf(f, "\nops (%d):\n", g->nops);
    int n = g->nsched ? g->nsched : g->nops;
    for (int k = 0; k < n; k++) {
        const Op *op = &g->ops[g->nsched ? g->sched[k] : k];
        fprintf(f, "  %-4d %-3s ", k, op_phase_label(g, op));
        for (int i = 0; i < op->nout; i++) {
            fprintf(f, "%s", i ? ", " : "");
            print_tensor_ref(f, g, op->out[i]);
            if ((op->acc >> i & 1) && op->nout > 1)
                fputs("(+)", f);
        }
        fprintf(f, "%s%s(", !op->nout ? "" : op->acc == 1 && op->nout == 1 ? " += " : " = ",
                op_info[op->kind].name);
        for (int i = 0; i < op->nin; i++) {
            fprintf(f, "%s", i ? ", " : "");
            print_tensor_ref(f, g, op->in[i]);
        }
        print_attrs(f, op);
        fputc(')', f);
        if (op->loc.line)
            fprintf(f, "  # %s:%d:%d", op->loc.file, op->loc.line, op->loc.col);
        fputc('\n', f);
    }
}

double graph_param_count(const Graph *g)
{
    double n = 0;
    for (int i = 0; i < g->nparams; i++)
        n += (double)g->t[g->params[i]].numel;
    return n;
}

double graph_forward_flops(const Graph *g)
{
    double f = 0;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].phase == PH_FWD && !g->ops[i].dead)
            f += op_flops(g, &g->ops[i]);
    return f;
}

void ir_print_summary(FILE *f, const Graph *g)
{
    int nfwd = 0, nbwd = 0, nopt = 0;
    double flops = 0, fwd = graph_forward_flops(g);
    for (int i = 0; i < g->nops; i++) {
        if (g->ops[i].dead)
            continue;
        nfwd += g->ops[i].phase == PH_FWD;
        nbwd += g->ops[i].phase == PH_BWD;
        nopt += g->ops[i].phase == PH_OPT;
        flops += op_flops(g, &g->ops[i]);
    }
    fprintf(f, "graph: %s\n", g->file);
    fprintf(f, "config: %s\n", g->config[0] ? g->config : "(defaults)");
    fprintf(f, "dims:");
    for (int i = 0; i < g->ndims; i++)
        fprintf(f, " %s=%ld", g->dims[i].name, g->dims[i].value);
    fprintf(f, "\nparameters: %.0f\n", graph_param_count(g));
    fprintf(f, "parameter_tensors: %d\n", g->nparams);
    fprintf(f, "tensors: %d\n", g->nt);
    fprintf(f, "ops: %d\n", nfwd + nbwd + nopt);
    fprintf(f, "forward_ops: %d\n", nfwd);
    fprintf(f, "backward_ops: %d\n", nbwd);
    fprintf(f, "optimizer_ops: %d\n", nopt);
    fprintf(f, "forward_gflops_per_step: %.3f\n", fwd / 1e9);
    fprintf(f, "total_gflops_per_step: %.3f\n", flops / 1e9);
    if (g->nsched) {
        fprintf(f, "schedule: %s\n", g->schedule_name);
        for (int r = 0; r < RG_COUNT; r++)   /* the host region when there is one */
            if (region_on_device((Region)r) || g->region_bytes[r])
                fprintf(f, "%s_bytes: %zu\n", region_name((Region)r), g->region_bytes[r]);
        fprintf(f, "arena_lower_bound_bytes: %zu\n", g->region_lower_bound[RG_ARENA]);
        fprintf(f, "planned_bytes: %zu\n", graph_device_bytes(g));   /* device memory */
        long launches[PH_COUNT], nl = 0;
        double bytes[PH_COUNT], nb = 0;
        graph_step_traffic(g, launches, bytes);
        for (int p = 0; p < PH_COUNT; p++) {
            nl += launches[p];
            nb += bytes[p];
        }
        fprintf(f, "kernel_launches_per_step: %ld\n", nl);
        fprintf(f, "bytes_moved_per_step: %.0f\n", nb);
    }
}
