/* psource.c — where each parameter lives in a safetensors checkpoint.
 *
 * `param wq: f32[L, C, C] = normal(0.02) from "model.layers.{l}.q_proj.weight"`
 * names one tensor per index of the parameter's first axis ({l} replaced by
 * the index); without a placeholder the whole parameter is one tensor. The
 * runtime's loader (runtime/safetensors.c) reads only what the graph says,
 * so it knows no model. docs/checkpoints.md describes the mapping.
 */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static int is_name_start(int c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
static int is_name_char(int c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

/* loc moved to the string's character i (the literal's quote is at loc.col) */
static Loc at(Loc loc, size_t i)
{
    if (loc.line > 0)
        loc.col += 1 + (int)i;
    return loc;
}

int psrc_parse(ParamSource *ps, const char *name, Loc loc)
{
    ps->name = xstrdup(name);
    ps->loc = loc;
    ps->layers = 0;
    ps->pre_len = (int)strlen(name);
    ps->post_off = ps->pre_len;
    if (!name[0]) {
        diag_error(loc, "empty tensor name");
        return -1;
    }
    if (!strcmp(name, "__metadata__")) {
        diag_error(loc, "'__metadata__' is the safetensors header's metadata, not a tensor name");
        return -1;
    }
    int open = -1;
    for (size_t i = 0; name[i]; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 32 || c > 126) {
            diag_error(at(loc, i), "tensor names are printable ASCII");
            return -1;
        }
        if (c == '}') {
            diag_error(at(loc, i), "'}' without a '{' in a tensor name");
            return -1;
        }
        if (c != '{')
            continue;
        if (open >= 0) {
            diag_error(at(loc, i), "a tensor name has at most one '{…}' (the index along the parameter's first axis)");
            return -1;
        }
        open = (int)i;
        size_t j = i + 1;
        while (name[j] && name[j] != '}' && name[j] != '{')
            j++;
        if (name[j] != '}') {
            diag_error(at(loc, i), "'{' is not closed by '}' in the tensor name");
            return -1;
        }
        if (j == i + 1 || !is_name_start((unsigned char)name[i + 1])) {
            diag_error(at(loc, i), "'{…}' holds the name of the layer index, such as {l}");
            return -1;
        }
        for (size_t k = i + 1; k < j; k++)
            if (!is_name_char((unsigned char)name[k])) {
                diag_error(at(loc, k), "'{…}' holds the name of the layer index, such as {l}");
                return -1;
            }
        ps->pre_len = (int)i;
        ps->post_off = (int)j + 1;
        ps->layers = 1;             /* the caller sets the count (the first axis) */
        i = j;
    }
    return 0;
}

int psrc_add_alt(ParamSource *ps, const char *name, Loc loc)
{
    if (ps->nalts == PSRC_MAX_ALTS) {
        diag_error(loc, "at most %d names after the first in a 'from'", PSRC_MAX_ALTS);
        return -1;
    }
    ParamSource t = {0};
    int rc = psrc_parse(&t, name, loc);
    if (rc == 0 && (t.layers > 0) != (ps->layers > 0)) {
        diag_error(loc, "every name of a 'from' has a '{…}' or none has (the first %s)",
                   ps->layers ? "has" : "has none");
        rc = -1;
    }
    if (rc == 0)
        ps->alt[ps->nalts++] = (PsrcName){t.name, t.pre_len, t.post_off, loc};
    else
        free(t.name);
    return rc;
}

void psrc_tensor_name(const ParamSource *ps, long k, char *buf, size_t len)
{
    if (!ps->layers)
        snprintf(buf, len, "%s", ps->name);
    else
        snprintf(buf, len, "%.*s%ld%s", ps->pre_len, ps->name, k, ps->name + ps->post_off);
}

typedef struct {
    char *name;
    int param;
} Entry;

static int cmp_entry(const void *a, const void *b)
{
    const Entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->param - y->param;
}

int psrc_check_unique(const Graph *g)
{
    long n = 0;
    for (int i = 0; i < g->nparams; i++)
        n += g->psrc[i].layers ? g->psrc[i].layers : 1;
    if (n > (1L << 20)) {
        diag_error(g->psrc[0].loc, "the parameters name %ld checkpoint tensors (at most 2^20)", n);
        return -1;
    }
    Entry *e = xmalloc((size_t)(n ? n : 1) * sizeof *e);
    long m = 0;
    char buf[600];
    for (int i = 0; i < g->nparams; i++) {
        const ParamSource *ps = &g->psrc[i];
        for (long k = 0; k < (ps->layers ? ps->layers : 1); k++) {
            psrc_tensor_name(ps, k, buf, sizeof buf);
            e[m++] = (Entry){xstrdup(buf), i};
        }
    }
    qsort(e, (size_t)m, sizeof *e, cmp_entry);
    int rc = 0;
    for (long k = 1; k < m && rc == 0; k++) {
        if (strcmp(e[k].name, e[k - 1].name))
            continue;
        const ParamSource *a = &g->psrc[e[k - 1].param], *b = &g->psrc[e[k].param];
        const char *pa = g->t[g->params[e[k - 1].param]].name, *pb = g->t[g->params[e[k].param]].name;
        if (a == b) {   /* cannot happen: one template names each index once */
            IR_BUG("tensor %s twice from parameter %s", e[k].name, pa);
        }
        const ParamSource *later = a->loc.line > b->loc.line ? a : b, *earlier = later == a ? b : a;
        diag_error(later->loc, "checkpoint tensor '%s' is named by parameters '%s' and '%s'", e[k].name,
                   later == a ? pa : pb, later == a ? pb : pa);
        if (earlier->loc.line > 0)
            diag_note(earlier->loc, "'%s' is named here too", e[k].name);
        rc = -1;
    }
    for (long k = 0; k < m; k++)
        free(e[k].name);
    free(e);
    return rc;
}

const ParamSource **psrc_table(const Graph *g)
{
    const ParamSource **tab = xcalloc((size_t)(g->nt ? g->nt : 1), sizeof *tab);
    for (int i = 0; g->psrc && i < g->nparams; i++)
        tab[g->params[i]] = &g->psrc[i];
    return tab;
}

void psrc_print(FILE *f, const ParamSource *ps)
{
    if (!ps || !ps->given)
        return;
    fprintf(f, " from=\"%s\"", ps->name);
    for (int k = 0; k < ps->nalts; k++)
        fprintf(f, "|\"%s\"", ps->alt[k].name);
    if (ps->transposed)
        fprintf(f, " transposed");
    int differs = 0;
    for (int k = 0; k < ps->rank; k++)
        differs |= ps->sshape[k] != ps->pshape[ps->transposed ? ps->rank - 1 - k : k];
    if (differs) {
        fprintf(f, " stored=[");
        for (int k = 0; k < ps->rank; k++)
            fprintf(f, "%s%ld", k ? "," : "", ps->sshape[k]);
        fputc(']', f);
    }
}
