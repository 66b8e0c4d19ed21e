/* build.c — AST -> IR. Resolves dims (defaults, the selected config, -D
 * overrides), checks requirements, declares inputs and parameters, unrolls
 * loops and turns every op call into IR ops with inferred shapes. Every user
 * error is located; building goes on after an error where it can, so one run
 * reports several. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"

/* Resource limits: a graph past one is refused with a located error at once,
 * long before an allocation or a hang. The IR holds at most IR_MAX_TENSORS
 * tensors; the forward graph is kept far below that, so the passes (which
 * add a few tensors per forward op) stay inside it. */
#define MAX_FWD_OPS 60000        /* ops of the forward graph */
#define MAX_STMT_EVALS 20000     /* statements executed, loops unrolled */
#define MAX_DIM (1L << 40)
#define MAX_NUMEL (1L << 36)     /* elements of one tensor (256 GiB in f32) */
#define MAX_NUMEL_TEXT "2^36"
_Static_assert(8 * MAX_FWD_OPS * IR_MAXIO < IR_MAX_TENSORS, "forward graph bound vs IR capacity");

typedef enum VKind { V_NONE, V_INT, V_FLOAT, V_TENSOR, V_LIST } VKind;
typedef struct Value {
    VKind k;
    long i;
    double f;
    int t;                      /* tensor id */
    long list[IR_MAXRANK];
    int n;
    /* an integer division in the expression gave 0 from a nonzero x (x / y,
       at trunc; line 0: none): a trap where a number is expected */
    Loc trunc;
    long tx, ty;
} Value;

typedef enum SymKind { SYM_DIM, SYM_INPUT, SYM_PARAM, SYM_VAR, SYM_LOOP } SymKind;
typedef struct Sym {
    const char *name;
    SymKind kind;
    Value v;
    Loc loc;
    size_t hash;                /* of name: lookup compares it first */
} Sym;

typedef struct Builder {
    Graph *g;
    Ast *ast;
    Sym *syms; int nsyms, capsyms;
    int layer;                  /* current loop iteration, -1 outside */
    const char *prefix;         /* "h3." inside a loop */
    const char *target;         /* the name being assigned, for naming temporaries */
    int depth;                  /* > 0 while evaluating the operands of an op */
    /* name uniqueness: open-addressing set of tensor names */
    char **names; size_t capnames, nnames;
    int failed_overflow;
    long nevals;                /* statements executed (MAX_STMT_EVALS) */
} Builder;

static const Value NONE = {.k = V_NONE};

/* ---- symbols -------------------------------------------------------------- */

static size_t hash_str(const char *s);

static Sym *lookup(Builder *b, const char *name)
{
    size_t h = hash_str(name);
    for (int i = b->nsyms - 1; i >= 0; i--)
        if (b->syms[i].hash == h && strcmp(b->syms[i].name, name) == 0)
            return &b->syms[i];
    return NULL;
}

static Sym *define(Builder *b, const char *name, SymKind kind, Value v, Loc loc)
{
    b->syms = xgrow(b->syms, &b->capsyms, b->nsyms + 1, sizeof *b->syms);   /* moves: hold no Sym * across */
    b->syms[b->nsyms] = (Sym){name, kind, v, loc, hash_str(name)};
    return &b->syms[b->nsyms++];
}

static const char *sym_kind_name(SymKind k)
{
    static const char *const n[] = {"dim", "input", "param", "variable", "loop variable"};
    return n[k];
}

/* ---- unique tensor names ------------------------------------------------------ */

static size_t hash_str(const char *s)
{
    size_t h = 1469598103934665603u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static int name_taken(Builder *b, const char *s)
{
    if (!b->capnames)
        return 0;
    for (size_t i = hash_str(s) & (b->capnames - 1); b->names[i]; i = (i + 1) & (b->capnames - 1))
        if (strcmp(b->names[i], s) == 0)
            return 1;
    return 0;
}

static void name_add(Builder *b, char *s)
{
    if (2 * (b->nnames + 1) > b->capnames) {
        size_t old = b->capnames;
        char **o = b->names;
        b->capnames = old ? 2 * old : 1024;
        b->names = xcalloc(b->capnames, sizeof *b->names);
        b->nnames = 0;
        for (size_t i = 0; i < old; i++)
            if (o[i])
                name_add(b, o[i]);
        free(o);
    }
    size_t i = hash_str(s) & (b->capnames - 1);
    while (b->names[i])
        i = (i + 1) & (b->capnames - 1);
    b->names[i] = s;
    b->nnames++;
}

/* A fresh tensor name "prefix+base", with ".2", ".3", … when taken. */
static char *unique_name(Builder *b, const char *base)
{
    char *s = xasprintf("%s%s", b->prefix, base);
    for (int k = 2; name_taken(b, s); k++) {
        free(s);
        s = xasprintf("%s%s.%d", b->prefix, base, k);
    }
    name_add(b, s);
    return s;
}

/* ---- numbers --------------------------------------------------------------------- */

static double num(Value v) { return v.k == V_INT ? (double)v.i : v.f; }
static int is_num(Value v) { return v.k == V_INT || v.k == V_FLOAT; }

static Value mk_int(long i) { return (Value){.k = V_INT, .i = i}; }
static Value mk_float(double f) { return (Value){.k = V_FLOAT, .f = f}; }

static const char *value_kind_name(VKind k)
{
    static const char *const n[] = {"nothing", "an integer", "a number", "a tensor", "a list"};
    return n[k];
}

static Value eval(Builder *b, Expr *e);

/* v is used where a number is expected: warns when an integer division in
 * it truncated to 0 (`scale(x, 1 / T)` is scale by 0). */
static void warn_truncated(Value v)
{
    if (v.trunc.line > 0)
        diag_warning(v.trunc, "integer division %ld / %ld truncates to 0 where a number is expected "
                     "(a number operand, as in 1.0 / T, keeps the fraction)", v.tx, v.ty);
}

/* the first truncation mark of x and y (warn_truncated) carried to r */
static Value carry_trunc(Value r, Value x, Value y)
{
    const Value *from = x.trunc.line ? &x : &y;
    if (r.trunc.line == 0 && from->trunc.line) {
        r.trunc = from->trunc;
        r.tx = from->tx;
        r.ty = from->ty;
    }
    return r;
}

static Value int_binop(Builder *b, Expr *e, long x, long y)
{
    long r = 0;
    switch (e->op) {
    case '+': if (__builtin_add_overflow(x, y, &r)) goto overflow; return mk_int(r);
    case '-': if (__builtin_sub_overflow(x, y, &r)) goto overflow; return mk_int(r);
    case '*': if (__builtin_mul_overflow(x, y, &r)) goto overflow; return mk_int(r);
    case '/': case '%':
        if (y == 0) {
            diag_error(e->loc, "division by zero");
            return NONE;
        }
        if (x == LONG_MIN && y == -1)
            goto overflow;
        if (e->op == '/' && x != 0 && x / y == 0) {
            Value v = mk_int(0);
            v.trunc = e->loc;
            v.tx = x;
            v.ty = y;
            return v;
        }
        return mk_int(e->op == '/' ? x / y : x % y);
    case '<': return mk_int(x < y);
    case '>': return mk_int(x > y);
    case BIN_EQ: return mk_int(x == y);
    case BIN_NE: return mk_int(x != y);
    case BIN_LE: return mk_int(x <= y);
    case BIN_GE: return mk_int(x >= y);
    }
    IR_BUG("binop %d", e->op);
overflow:
    diag_error(e->loc, "integer overflow");
    return NONE;
}

static Value float_binop(Builder *b, Expr *e, double x, double y)
{
    (void)b;
    switch (e->op) {
    case '+': return mk_float(x + y);
    case '-': return mk_float(x - y);
    case '*': return mk_float(x * y);
    case '/':
        if (y == 0) {
            diag_error(e->loc, "division by zero");
            return NONE;
        }
        return mk_float(x / y);
    case '%':
        diag_error(e->loc, "'%%' needs integers");
        return NONE;
    case '<': return mk_int(x < y);
    case '>': return mk_int(x > y);
    case BIN_EQ: return mk_int(x == y);
    case BIN_NE: return mk_int(x != y);
    case BIN_LE: return mk_int(x <= y);
    case BIN_GE: return mk_int(x >= y);
    }
    IR_BUG("binop %d", e->op);
}

/* ---- ops ---------------------------------------------------------------------------- */

/* Attribute j of an op kind: its name (into buf), whether it is the list
 * attribute or an integer one, and its default (NAN when required). Returns
 * the count. */
static int op_attrs(OpKind k, char names[][32], int *is_list, int *is_int, double *defaults)
{
    const char *s = op_info[k].attrs;
    int n = 0;
    while (*s) {
        int list = *s == '[';
        is_int[n] = *s == '#';
        s += list || is_int[n];
        size_t len = strcspn(s, ",=");
        snprintf(names[n], 32, "%.*s", (int)len, s);
        s += len;
        defaults[n] = NAN;
        if (*s == '=') {
            defaults[n] = strtod(s + 1, NULL);
            s += 1 + strcspn(s + 1, ",");
        }
        is_list[n] = list;
        n++;
        if (*s == ',')
            s++;
    }
    return n;
}

/* Adds op `kind` on inputs in[] with attributes already in *proto; creates
 * its outputs (named after the current assignment). Returns the op id or -1
 * after a located error. */
static int add_op(Builder *b, Op *proto, Loc loc)
{
    Graph *g = b->g;
    int nout, rank[IR_MAXIO];
    long shape[IR_MAXIO][IR_MAXRANK];
    DType dt[IR_MAXIO];
    char err[256];
    if (g->nops >= MAX_FWD_OPS) {
        if (!b->failed_overflow++)
            diag_error(loc, "the graph has more than %d ops (a loop too long?)", MAX_FWD_OPS);
        return -1;
    }
    if (op_infer(g, proto, &nout, rank, shape, dt, err, sizeof err) != 0) {
        diag_error(loc, "%s", err);
        return -1;
    }
    int out[IR_MAXIO];
    static const char *const aux[] = {"", ".mean", ".rstd"};
    for (int k = 0; k < nout; k++) {
        long numel = 1;
        for (int i = 0; i < rank[k]; i++)
            if (__builtin_mul_overflow(numel, shape[k][i], &numel) || numel > MAX_NUMEL) {
                diag_error(loc, "tensor too large (more than " MAX_NUMEL_TEXT " elements)");
                return -1;
            }
        /* the outermost op of an assignment takes the assigned name; nested
           ones are named after it: "h0.att.matmul" */
        char *target = b->depth ? xasprintf("%s.%s", b->target, op_info[proto->kind].name) : xstrdup(b->target);
        char *base = proto->kind == OP_LAYERNORM ? xasprintf("%s%s", target, aux[k])
                   : proto->kind == OP_RMSNORM ? xasprintf("%s%s", target, aux[k ? 2 : 0])
                   : nout > 1 ? xasprintf("%s.%d", target, k) : xstrdup(target);
        free(target);
        char *name = unique_name(b, base);
        free(base);
        out[k] = graph_add_tensor(g, name, dt[k], rank[k], shape[k], TK_ACTIVATION, loc);
    }
    int id = graph_add_op(g, proto->kind, g->t[out[0]].name, proto->in, proto->nin, out, nout, loc);
    Op *op = &g->ops[id];
    memcpy(op->attr, proto->attr, sizeof op->attr);
    memcpy(op->list, proto->list, sizeof op->list);
    op->nlist = proto->nlist;
    op->phase = PH_FWD;
    op->layer = b->layer;
    if (op_info[op->kind].cls == OPC_VIEW)
        op_make_views(g, op);
    return id;
}

static Value tensor_value(int t) { return (Value){.k = V_TENSOR, .t = t}; }

/* A binary op on two tensors (+ -> add, * -> mul: the smaller operand
 * second; - -> sub: the second must be the smaller). */
static Value tensor_binop(Builder *b, Expr *e, Value x, Value y)
{
    OpKind kind = e->op == '+' ? OP_ADD : e->op == '*' ? OP_MUL : e->op == '-' ? OP_SUB : OP_COUNT;
    if (kind == OP_COUNT) {
        diag_error(e->loc, "operator '%c' is not defined on tensors (use an op such as scale)",
                   e->op < 256 ? e->op : '?');
        return NONE;
    }
    Op proto = {.kind = kind, .nin = 2, .in = {x.t, y.t}};
    if (kind != OP_SUB && b->g->t[x.t].rank < b->g->t[y.t].rank) {   /* broadcast operand goes second */
        proto.in[0] = y.t;
        proto.in[1] = x.t;
    }
    int id = add_op(b, &proto, e->loc);
    return id < 0 ? NONE : tensor_value(b->g->ops[id].out[0]);
}

static Value eval_math(Builder *b, Expr *e)
{
    if (e->nargs != 1 || e->kw[0]) {
        diag_error(e->loc, "%s() takes one number", e->name);
        return NONE;
    }
    Value a = eval(b, e->args[0]);
    if (a.k == V_NONE)
        return NONE;
    if (!is_num(a)) {
        diag_error(e->args[0]->loc, "%s() takes a number, got %s", e->name, value_kind_name(a.k));
        return NONE;
    }
    warn_truncated(a);
    double x = num(a);
    if (strcmp(e->name, "sqrt") == 0) {
        if (x < 0) {
            diag_error(e->loc, "sqrt of a negative number");
            return NONE;
        }
        return mk_float(sqrt(x));
    }
    if (strcmp(e->name, "exp") == 0)
        return mk_float(exp(x));
    if (x <= 0) {
        diag_error(e->loc, "log of a non-positive number");
        return NONE;
    }
    return mk_float(log(x));
}

/* split(x, parts, axis) along an axis other than 0: one narrow (a copy)
 * per part, returned as a list as the view split's outputs are */
static Value split_axis(Builder *b, const Op *proto, Loc loc)
{
    const Tensor *x = &b->g->t[proto->in[0]];
    long parts = (long)proto->attr[0];
    int ax = (int)proto->attr[1];
    if (parts < 1 || parts > IR_MAXIO || x->shape[ax] % parts) {
        diag_error(loc, "split: cannot split axis %d of size %ld into %ld parts (1..%d parts that divide it)", ax,
                   x->shape[ax], parts, IR_MAXIO);
        return NONE;
    }
    Value v = {.k = V_LIST, .n = (int)parts, .i = -1};   /* i = -1: a tensor list */
    const char *saved = b->target;
    for (long k = 0; k < parts; k++) {
        long len = b->g->t[proto->in[0]].shape[ax] / parts;
        Op p = {.kind = OP_NARROW, .nin = 1, .in = {proto->in[0]}, .attr = {(double)(k * len), (double)len, ax}};
        char *name = xasprintf("%s.%ld", saved, k);
        b->target = name;
        int id = add_op(b, &p, loc);
        b->target = saved;
        free(name);
        if (id < 0)
            return NONE;
        v.list[k] = b->g->ops[id].out[0];
    }
    return v;
}

/* name(args): a math function or an op */
static Value eval_call(Builder *b, Expr *e)
{
    if (!strcmp(e->name, "sqrt") || !strcmp(e->name, "exp") || !strcmp(e->name, "log"))
        return eval_math(b, e);
    int kind = op_lookup(e->name);
    if (kind < 0) {
        diag_error(e->loc, "unknown op '%s'", e->name);
        return NONE;
    }
    const OpInfo *info = &op_info[kind];
    char anames[8][32];
    int is_list[8], is_int[8];
    double defaults[8];
    int nattr = op_attrs((OpKind)kind, anames, is_list, is_int, defaults);
    Op proto = {.kind = (OpKind)kind};
    int have[8] = {0}, npos = 0, ok = 1;
    for (int a = 0; a < e->nargs; a++) {
        int slot;                       /* < nin: tensor input; else attribute slot - nin */
        if (e->kw[a]) {
            slot = -1;
            for (int j = 0; j < nattr; j++)
                if (strcmp(anames[j], e->kw[a]) == 0)
                    slot = info->nin + j;
            if (slot < 0) {
                char list[128] = "";
                for (int j = 0; j < nattr; j++)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "", anames[j]);
                diag_error(e->kwloc[a], "op '%s' has no attribute '%s'%s%s%s", e->name, e->kw[a],
                           nattr ? " (attributes: " : "", list, nattr ? ")" : "");
                ok = 0;
                continue;
            }
        } else {
            slot = npos++;
            if (slot >= info->nin + nattr) {
                diag_error(e->args[a]->loc, "op '%s' takes %d tensor input%s%s%d attribute%s; too many arguments",
                           e->name, info->nin, info->nin == 1 ? "" : "s", nattr ? " and " : ", ", nattr,
                           nattr == 1 ? "" : "s");
                ok = 0;
                continue;
            }
        }
        b->depth++;
        Value v = eval(b, e->args[a]);
        b->depth--;
        if (v.k == V_NONE) {
            ok = 0;
            continue;
        }
        if (slot < info->nin) {
            if (v.k != V_TENSOR) {
                diag_error(e->args[a]->loc, "argument %d of '%s' must be a tensor, got %s", slot + 1, e->name,
                           value_kind_name(v.k));
                ok = 0;
                continue;
            }
            proto.in[slot] = v.t;
            continue;
        }
        int j = slot - info->nin;
        if (have[j]++) {
            diag_error(e->args[a]->loc, "attribute '%s' of '%s' given twice", anames[j], e->name);
            ok = 0;
        } else if (is_list[j]) {
            if (v.k != V_LIST) {
                diag_error(e->args[a]->loc, "attribute '%s' of '%s' must be a list such as [B, T, C], got %s",
                           anames[j], e->name, value_kind_name(v.k));
                ok = 0;
                continue;
            }
            memcpy(proto.list, v.list, sizeof v.list);
            proto.nlist = v.n;
        } else if (!is_num(v)) {
            diag_error(e->args[a]->loc, "attribute '%s' of '%s' must be a number, got %s", anames[j], e->name,
                       value_kind_name(v.k));
            ok = 0;
        } else if (!isfinite(num(v)) || fabs(num(v)) > 2147483647.0) {   /* kernels take int attributes */
            diag_error(e->args[a]->loc, "attribute '%s' of '%s' must be finite and within +-2^31, got %g", anames[j],
                       e->name, num(v));
            ok = 0;
        } else if (is_int[j] && num(v) != floor(num(v))) {
            diag_error(e->args[a]->loc, "attribute '%s' of '%s' must be an integer, got %.9g", anames[j], e->name,
                       num(v));
            ok = 0;
        } else {
            if (!is_int[j])
                warn_truncated(v);
            proto.attr[j] = num(v);
        }
    }
    if (!ok)
        return NONE;
    if (npos < info->nin) {
        diag_error(e->loc, "op '%s' takes %d tensor input%s, got %d", e->name, info->nin,
                   info->nin == 1 ? "" : "s", npos);
        return NONE;
    }
    proto.nin = info->nin;
    for (int j = 0; j < nattr; j++) {
        if (have[j])
            continue;
        if (isnan(defaults[j])) {
            diag_error(e->loc, "op '%s' needs attribute '%s'", e->name, anames[j]);
            return NONE;
        }
        proto.attr[j] = defaults[j];
    }
    if (kind == OP_SLICE || kind == OP_SPLIT || kind == OP_CONCAT || kind == OP_REPEAT) {
        /* the axis attribute: negative counts from the end */
        int slot = kind == OP_SLICE ? 2 : kind == OP_CONCAT ? 0 : 1, rank = b->g->t[proto.in[0]].rank;
        if (proto.attr[slot] < 0)
            proto.attr[slot] += rank;
        if (proto.attr[slot] < 0 || proto.attr[slot] >= (rank ? rank : 1)) {
            diag_error(e->loc, "%s: axis %g is outside [-%d, %d) (the input's rank is %d)", e->name,
                       proto.attr[slot] - (proto.attr[slot] < 0 ? rank : 0), rank, rank, rank);
            return NONE;
        }
        if (kind == OP_SLICE && proto.attr[2] != 0)   /* not a view: a copy */
            proto.kind = OP_NARROW;
        if (kind == OP_SPLIT && proto.attr[1] != 0)
            return split_axis(b, &proto, e->loc);
    }
    if (kind == OP_CROSS_ENTROPY && proto.attr[0] == 0 && b->g->t[proto.in[0]].rank > 0)   /* n=0: every column
                                                          (a scalar is the shape rule's error) */
        proto.attr[0] = (double)b->g->t[proto.in[0]].shape[b->g->t[proto.in[0]].rank - 1];
    int id = add_op(b, &proto, e->loc);
    if (id < 0)
        return NONE;
    Op *op = &b->g->ops[id];
    if (op->nout > 1 && op_info[op->kind].cls == OPC_VIEW) {
        /* multi-output: returned as a list of tensor ids */
        Value v = {.k = V_LIST, .n = op->nout};
        for (int k = 0; k < op->nout; k++)
            v.list[k] = op->out[k];
        v.i = -1;                       /* marks a tensor list */
        return v;
    }
    return tensor_value(op->out[0]);
}

static Value eval(Builder *b, Expr *e)
{
    switch (e->kind) {
    case E_INT:
        return mk_int(e->ival);
    case E_FLOAT:
        return mk_float(e->fval);
    case E_NAME: {
        Sym *s = lookup(b, e->name);
        if (!s) {
            diag_error(e->loc, "undefined name '%s'", e->name);
            return NONE;
        }
        return s->v;
    }
    case E_NEG: {
        Value a = eval(b, e->a);
        if (a.k == V_INT)
            return a.i == LONG_MIN ? NONE : carry_trunc(mk_int(-a.i), a, NONE);
        if (a.k == V_FLOAT)
            return carry_trunc(mk_float(-a.f), a, NONE);
        if (a.k != V_NONE)
            diag_error(e->loc, "unary '-' needs a number, got %s", value_kind_name(a.k));
        return NONE;
    }
    case E_BINOP: {
        b->depth++;
        Value x = eval(b, e->a), y = eval(b, e->b);
        b->depth--;
        if (x.k == V_NONE || y.k == V_NONE)
            return NONE;
        if (x.k == V_INT && y.k == V_INT)
            return carry_trunc(int_binop(b, e, x.i, y.i), x, y);
        if (is_num(x) && is_num(y))
            return carry_trunc(float_binop(b, e, num(x), num(y)), x, y);
        if (x.k == V_TENSOR && y.k == V_TENSOR)
            return tensor_binop(b, e, x, y);
        diag_error(e->loc, "operands are %s and %s", value_kind_name(x.k), value_kind_name(y.k));
        return NONE;
    }
    case E_CALL:
        return eval_call(b, e);
    case E_INDEX: {
        Value x = eval(b, e->a), i = eval(b, e->b);
        if (x.k == V_NONE || i.k == V_NONE)
            return NONE;
        if (x.k != V_TENSOR || i.k != V_INT) {
            diag_error(e->loc, "indexing needs a tensor and an integer, got %s and %s", value_kind_name(x.k),
                       value_kind_name(i.k));
            return NONE;
        }
        Op proto = {.kind = OP_INDEX, .nin = 1, .in = {x.t}, .attr = {(double)i.i}};
        const char *saved = b->target;
        char *name = xasprintf("%s[%ld]", b->g->t[x.t].name, i.i);
        int depth = b->depth;
        b->target = name;
        b->depth = 0;
        int id = add_op(b, &proto, e->loc);
        b->target = saved;
        b->depth = depth;
        free(name);
        return id < 0 ? NONE : tensor_value(b->g->ops[id].out[0]);
    }
    case E_LIST: {
        Value v = {.k = V_LIST};
        if (e->nargs > IR_MAXRANK) {
            diag_error(e->loc, "a list holds at most %d items", IR_MAXRANK);
            return NONE;
        }
        for (int i = 0; i < e->nargs; i++) {
            Value it = eval(b, e->args[i]);
            if (it.k == V_NONE)
                return NONE;
            if (it.k != V_INT) {
                diag_error(e->args[i]->loc, "list items must be integers, got %s", value_kind_name(it.k));
                return NONE;
            }
            v.list[v.n++] = it.i;
        }
        return v;
    }
    }
    IR_BUG("expr kind %d", e->kind);
}

/* ---- statements ------------------------------------------------------------------------ */

/* Evaluates a type's shape; -1 after an error. */
static int eval_type(Builder *b, TypeExpr *ty, DType *dt, int *rank, long *shape)
{
    if (!strcmp(ty->dtype, "f32"))
        *dt = DT_F32;
    else if (!strcmp(ty->dtype, "i32"))
        *dt = DT_I32;
    else if (!strcmp(ty->dtype, "bf16"))
        *dt = DT_BF16;
    else {
        diag_error(ty->loc, "unknown dtype '%s' (f32, bf16 or i32)", ty->dtype);
        return -1;
    }
    if (ty->ndims > IR_MAXRANK) {
        diag_error(ty->loc, "at most %d dimensions", IR_MAXRANK);
        return -1;
    }
    *rank = ty->ndims;
    long numel = 1;
    for (int i = 0; i < ty->ndims; i++) {
        Value v = eval(b, ty->dims[i]);
        if (v.k == V_NONE)
            return -1;
        if (v.k != V_INT || v.i < 1) {
            diag_error(ty->dims[i]->loc, "a dimension must be a positive integer, got %s",
                       v.k == V_INT ? "a non-positive one" : value_kind_name(v.k));
            return -1;
        }
        shape[i] = v.i;
        if (__builtin_mul_overflow(numel, v.i, &numel) || numel > MAX_NUMEL) {
            diag_error(ty->loc, "tensor too large (more than " MAX_NUMEL_TEXT " elements)");
            return -1;
        }
    }
    return 0;
}

static int check_new_name(Builder *b, const char *name, Loc loc)
{
    Sym *s = lookup(b, name);
    if (s && s->kind != SYM_VAR) {
        diag_error(loc, "redefinition of %s '%s'", sym_kind_name(s->kind), name);
        diag_note(s->loc, "'%s' was defined here", name);
        return -1;
    }
    if (s) {
        diag_error(loc, "'%s' is already a variable", name);
        return -1;
    }
    return 0;
}

/* A parameter's checkpoint tensors (ir/psource.c): its `from` clause, or
 * its own name, whole. ps is filled even after an error. */
static void declare_source(Builder *b, Stmt *s, int t, ParamSource *ps)
{
    const Tensor *p = &b->g->t[t];
    FromClause *fc = s->from;
    memset(ps, 0, sizeof *ps);
    if (s->nfrom > 1)
        diag_error(s->from_loc, "a parameter takes one 'from'");
    if (psrc_parse(ps, fc ? fc->name : p->name, fc ? fc->loc : s->name_loc) != 0)
        ps->layers = 0;
    ps->given = fc != NULL;
    int lead = ps->layers ? 1 : 0;
    if (lead && p->rank == 0) {
        diag_error(fc->loc, "'{…}' names one tensor per index of the first axis, but '%s' is a scalar", s->name);
        lead = 0, ps->layers = 0;
    }
    if (lead)
        ps->layers = p->shape[0];
    for (int k = 0; fc && k < fc->nalts; k++)
        psrc_add_alt(ps, fc->alts[k], fc->alt_locs[k]);
    ps->rank = p->rank - lead;
    for (int k = 0; k < ps->rank; k++)
        ps->pshape[k] = ps->sshape[k] = p->shape[k + lead];
    if (!fc)
        return;
    ps->transposed = fc->transposed;
    if (ps->transposed && ps->rank != 2) {
        diag_error(fc->loc, "'transposed' needs a matrix per tensor; '%s' gives %d ax%s per tensor", s->name,
                   ps->rank, ps->rank == 1 ? "is" : "es");
        ps->transposed = 0;
    }
    if (ps->transposed) {
        ps->sshape[0] = ps->pshape[1];
        ps->sshape[1] = ps->pshape[0];
    }
    if (!fc->has_shape)
        return;
    TypeExpr *ty = &fc->shape;
    if (ty->ndims != ps->rank) {
        diag_error(ty->loc, "the stored shape has %d ax%s; one tensor of '%s' has %d", ty->ndims,
                   ty->ndims == 1 ? "is" : "es", s->name, ps->rank);
        return;
    }
    for (int k = 0; k < ty->ndims; k++) {
        Value v = eval(b, ty->dims[k]);
        if (v.k == V_NONE)
            return;
        long full = ps->sshape[k];
        if (v.k != V_INT || v.i < 1 || v.i > full) {
            diag_error(ty->dims[k]->loc, "a stored axis is a positive integer at most the parameter's (%ld%s)",
                       full, ps->transposed ? ", transposed" : "");
            return;
        }
        ps->sshape[k] = v.i;
    }
}

static void declare_tensor(Builder *b, Stmt *s, TensorKind kind)
{
    DType dt;
    int rank;
    long shape[IR_MAXRANK];
    if (check_new_name(b, s->name, s->name_loc))
        return;
    if (eval_type(b, &s->type, &dt, &rank, shape)) {   /* bound to nothing: its uses add no errors */
        define(b, s->name, kind == TK_PARAM ? SYM_PARAM : SYM_INPUT, NONE, s->name_loc);
        return;
    }
    Graph *g = b->g;
    char *name = unique_name(b, s->name);
    int t = graph_add_tensor(g, name, dt, rank, shape, kind, s->name_loc);
    define(b, s->name, kind == TK_PARAM ? SYM_PARAM : SYM_INPUT, tensor_value(t), s->name_loc);
    if (kind == TK_INPUT) {
        g->inputs = xrealloc(g->inputs, (size_t)(g->ninputs + 1) * sizeof(int));
        g->inputs[g->ninputs++] = t;
        return;
    }
    if (dt != DT_F32)
        diag_error(s->type.loc, "parameters must be f32 (master weights); bf16 copies come from --precision");
    g->params = xrealloc(g->params, (size_t)(g->nparams + 1) * sizeof(int));
    g->psrc = xrealloc(g->psrc, (size_t)(g->nparams + 1) * sizeof *g->psrc);
    g->params[g->nparams++] = t;
    declare_source(b, s, t, &g->psrc[g->nparams - 1]);
    if (s->nodecay > 1)
        diag_error(s->nodecay_loc, "'nodecay' given twice");
    Tensor *p = &g->t[t];
    p->decay = !s->nodecay;
    p->init = INIT_ZEROS;
    Expr *init = s->value;
    if (!init)
        return;
    if (init->kind == E_NAME && !strcmp(init->name, "zeros"))
        p->init = INIT_ZEROS;
    else if (init->kind == E_NAME && !strcmp(init->name, "ones"))
        p->init = INIT_ONES;
    else if (init->kind == E_CALL && !strcmp(init->name, "normal") && init->nargs == 1 && !init->kw[0]) {
        Value v = eval(b, init->args[0]);
        if (v.k == V_NONE)
            return;
        if (!is_num(v) || !(num(v) >= 0) || !isfinite(num(v))) {
            diag_error(init->args[0]->loc, "normal() takes a non-negative standard deviation");
            return;
        }
        warn_truncated(v);
        p->init = INIT_NORMAL;
        p->init_std = num(v);
    } else {
        diag_error(init->loc, "unknown init rule (zeros, ones or normal(std))");
    }
}

static void build_stmts(Builder *b, Stmt **stmts, int n);

/* After a failed assignment (its error reported) its names are bound to
 * nothing: a use of one evaluates to nothing without a message, so one
 * mistake is one error, not one more at every use. */
static void poison_names(Builder *b, Stmt *s)
{
    for (int i = 0; i < s->nnames; i++) {
        Sym *sym = lookup(b, s->names[i]);
        if (sym)
            sym->v = NONE;
        else
            define(b, s->names[i], SYM_VAR, NONE, s->name_locs[i]);
    }
}

static void build_assign(Builder *b, Stmt *s)
{
    for (int i = 0; i < s->nnames; i++) {
        Sym *sym = lookup(b, s->names[i]);
        if (sym && sym->kind != SYM_VAR) {
            diag_error(s->name_locs[i], "cannot assign to %s '%s'", sym_kind_name(sym->kind), s->names[i]);
            return;
        }
    }
    b->target = s->names[0];
    Value v = eval(b, s->value);
    if (v.k == V_NONE) {
        poison_names(b, s);
        return;
    }
    int multi = v.k == V_LIST && v.i == -1;
    if (s->nnames > 1 || multi) {
        if (!multi || v.n != s->nnames) {
            char what[64];
            snprintf(what, sizeof what, multi ? "an op with %d outputs" : "a single value", v.n);
            diag_error(s->loc, "%d name%s assigned from %s", s->nnames, s->nnames == 1 ? "" : "s", what);
            poison_names(b, s);
            return;
        }
        for (int i = 0; i < s->nnames; i++) {
            Tensor *t = &b->g->t[v.list[i]];
            free(t->name);
            t->name = xstrdup(unique_name(b, s->names[i]));
        }
    }
    for (int i = 0; i < s->nnames; i++) {
        Value vi = multi ? tensor_value((int)v.list[i]) : v;
        Sym *sym = lookup(b, s->names[i]);
        if (sym)
            sym->v = vi;
        else
            define(b, s->names[i], SYM_VAR, vi, s->name_locs[i]);
    }
}

static void build_for(Builder *b, Stmt *s)
{
    Sym *r = lookup(b, s->range);
    if (!r) {
        diag_error(s->range_loc, "undefined name '%s'", s->range);
        return;
    }
    if (r->kind != SYM_DIM) {
        diag_error(s->range_loc, "a loop runs over a dim; '%s' is a %s", s->range, sym_kind_name(r->kind));
        return;
    }
    if (b->layer >= 0) {
        diag_error(s->loc, "loops do not nest");
        return;
    }
    if (lookup(b, s->name)) {
        diag_error(s->name_loc, "loop variable '%s' shadows a name defined before", s->name);
        return;
    }
    long n = r->v.i;
    if (n > MAX_STMT_EVALS || n * (long)s->nbody > MAX_STMT_EVALS - b->nevals) {
        if (!b->failed_overflow++)
            diag_error(s->range_loc, "the loop runs %ld times over %d statement%s: more than the %d statements a "
                       "graph may execute", n, s->nbody, s->nbody == 1 ? "" : "s", MAX_STMT_EVALS);
        return;
    }
    int errors = diag_count();
    for (long i = 0; i < n && diag_count() == errors && !b->failed_overflow; i++) {
        int mark = b->nsyms;
        define(b, s->name, SYM_LOOP, mk_int(i), s->name_loc);
        char *prefix = xasprintf("h%ld.", i);
        b->prefix = prefix;
        b->layer = (int)i;
        build_stmts(b, s->body, s->nbody);
        b->prefix = "";
        b->layer = -1;
        free(prefix);
        /* the loop variable goes out of scope; variables stay bound */
        int keep = mark;
        for (int j = mark; j < b->nsyms; j++)
            if (b->syms[j].kind != SYM_LOOP)
                b->syms[keep++] = b->syms[j];
        b->nsyms = keep;
    }
}

static void build_optimizer(Builder *b, Stmt *s)
{
    Expr *e = s->value;
    if (strcmp(e->name, "adamw") != 0) {
        diag_error(e->loc, "unknown optimizer '%s' (adamw)", e->name);
        return;
    }
    static const char *const keys[] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    double *dst[] = {&b->g->lr, &b->g->beta1, &b->g->beta2, &b->g->eps, &b->g->weight_decay};
    for (int a = 0; a < e->nargs; a++) {
        int k = -1;
        for (int j = 0; j < 5; j++)
            if (e->kw[a] && !strcmp(e->kw[a], keys[j]))
                k = j;
        if (k < 0) {
            diag_error(e->kwloc[a], "adamw takes lr=, beta1=, beta2=, eps=, weight_decay=");
            continue;
        }
        Value v = eval(b, e->args[a]);
        if (v.k != V_NONE && (!is_num(v) || num(v) < 0 || !isfinite(num(v))))
            diag_error(e->args[a]->loc, "%s must be a non-negative number", keys[k]);
        else if (v.k != V_NONE) {
            warn_truncated(v);
            *dst[k] = num(v);
        }
    }
}

static void build_stmt(Builder *b, Stmt *s)
{
    b->target = "";
    if (++b->nevals > MAX_STMT_EVALS) {
        if (!b->failed_overflow++)
            diag_error(s->loc, "the graph executes more than %d statements (loops unrolled)", MAX_STMT_EVALS);
        return;
    }
    switch (s->kind) {
    case S_DIM: case S_CONFIG:
        if (b->layer >= 0)
            diag_error(s->loc, "%s statements belong at the top level", s->kind == S_DIM ? "dim" : "config");
        return;                         /* handled by resolve_dims */
    case S_REQUIRE: {
        Value v = eval(b, s->value);
        if (v.k == V_NONE)
            return;
        if (v.k != V_INT) {
            diag_error(s->value->loc, "a requirement must be a comparison of integers");
            return;
        }
        if (!v.i) {
            char vals[256] = "";
            for (int i = 0; i < b->g->ndims; i++) {
                const char *nm = b->g->dims[i].name;
                /* the dims the condition's source line mentions, by name */
                Expr *stack[64];
                int sp = 0, found = 0;
                stack[sp++] = s->value;
                while (sp && !found) {
                    Expr *x = stack[--sp];
                    if (x->kind == E_NAME && !strcmp(x->name, nm))
                        found = 1;
                    if (x->a && sp < 63) stack[sp++] = x->a;
                    if (x->b && sp < 63) stack[sp++] = x->b;
                }
                if (found)
                    snprintf(vals + strlen(vals), sizeof vals - strlen(vals), "%s%s = %ld",
                             vals[0] ? ", " : "", nm, b->g->dims[i].value);
            }
            diag_error(s->loc, "requirement does not hold%s%s", vals[0] ? " with " : "", vals);
        }
        return;
    }
    case S_INPUT:
        declare_tensor(b, s, TK_INPUT);
        return;
    case S_PARAM:
        declare_tensor(b, s, TK_PARAM);
        return;
    case S_ASSIGN:
        build_assign(b, s);
        return;
    case S_FOR:
        build_for(b, s);
        return;
    case S_MINIMIZE: {
        Sym *sym = lookup(b, s->name);
        if (!sym) {
            diag_error(s->name_loc, "undefined name '%s'", s->name);
        } else if (sym->v.k == V_NONE) {
            /* its definition failed, with an error */
        } else if (sym->v.k != V_TENSOR || b->g->t[sym->v.t].rank != 0) {
            diag_error(s->name_loc, "minimize needs a scalar tensor; '%s' is %s", s->name,
                       sym->v.k == V_TENSOR ? "not a scalar" : value_kind_name(sym->v.k));
        } else if (b->g->loss >= 0) {
            diag_error(s->loc, "only one minimize statement is allowed");
        } else {
            b->g->loss = sym->v.t;
        }
        return;
    }
    case S_OPTIMIZER:
        build_optimizer(b, s);
        return;
    }
}

static void build_stmts(Builder *b, Stmt **stmts, int n)
{
    for (int i = 0; i < n && !b->failed_overflow; i++)
        build_stmt(b, stmts[i]);
}

/* ---- dims and configs ------------------------------------------------------------------ */

/* Parses a -D value: a positive decimal integer. */
static int parse_define(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 1 || v > MAX_DIM)
        return -1;
    *out = v;
    return 0;
}

/* Declares every dim in order. A dim's value is its -D override, else the
 * selected config's value, else its default expression. */
static void resolve_dims(Builder *b, const BuildOptions *opt)
{
    Ast *ast = b->ast;
    Stmt *config = NULL;
    int nconfigs = 0;
    for (int i = 0; i < ast->nstmts; i++) {
        Stmt *s = ast->stmts[i];
        if (s->kind != S_CONFIG)
            continue;
        nconfigs++;
        for (int j = 0; j < i; j++)
            if (ast->stmts[j]->kind == S_CONFIG && !strcmp(ast->stmts[j]->name, s->name)) {
                diag_error(s->name_loc, "redefinition of config '%s'", s->name);
                diag_note(ast->stmts[j]->name_loc, "'%s' was defined here", s->name);
            }
        if (opt->config && !strcmp(s->name, opt->config))
            config = s;
    }
    if (opt->config && !config) {
        char list[512] = "";
        for (int i = 0; i < ast->nstmts; i++)
            if (ast->stmts[i]->kind == S_CONFIG)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "",
                         ast->stmts[i]->name);
        diag_error((Loc){0}, "unknown config '%s' in %s (%s%s)", opt->config, ast->file,
                   nconfigs ? "available: " : "the file defines no configs", list);
    }
    for (int d = 0; d < opt->ndefines; d++) {
        long v;
        if (parse_define(opt->defines[d].value, &v))
            diag_error((Loc){0}, "-D %s=%s: the value must be a positive integer", opt->defines[d].name,
                       opt->defines[d].value);
    }
    for (int i = 0; i < ast->nstmts; i++) {
        Stmt *s = ast->stmts[i];
        if (s->kind != S_DIM)
            continue;
        if (check_new_name(b, s->name, s->name_loc))
            continue;
        Value v = NONE;
        const char *override = NULL;
        for (int d = 0; d < opt->ndefines; d++)
            if (!strcmp(opt->defines[d].name, s->name))
                override = opt->defines[d].value;
        long dv;
        if (override && !parse_define(override, &dv)) {
            v = mk_int(dv);
        } else if (!override) {
            Expr *e = s->value;
            for (int k = 0; config && k < config->nnames; k++)
                if (!strcmp(config->names[k], s->name))
                    e = config->values[k];
            v = eval(b, e);
            if (v.k != V_NONE && (v.k != V_INT || v.i < 1 || v.i > MAX_DIM)) {
                diag_error(e->loc, "dim '%s' must be a positive integer (at most 2^40)", s->name);
                v = NONE;
            }
        }
        if (v.k == V_NONE)
            v = mk_int(1);              /* keep going; the error is reported */
        define(b, s->name, SYM_DIM, v, s->name_loc);
        Graph *g = b->g;
        g->dims = xrealloc(g->dims, (size_t)(g->ndims + 1) * sizeof *g->dims);
        g->dims[g->ndims++] = (Dim){xstrdup(s->name), v.i, s->name_loc};
    }
    for (int d = 0; d < opt->ndefines; d++)
        if (!lookup(b, opt->defines[d].name))
            diag_error((Loc){0}, "-D %s: %s has no dim named '%s'", opt->defines[d].name, ast->file,
                       opt->defines[d].name);
    for (int k = 0; config && k < config->nnames; k++) {
        Sym *s = lookup(b, config->names[k]);
        if (!s || s->kind != SYM_DIM)
            diag_error(config->name_locs[k], "config '%s' sets '%s', which is not a dim", config->name,
                       config->names[k]);
    }
}

/* Warns about each input and parameter that no op reads, or whose readers
 * do not lead to the loss (a parameter so is still stored and updated, with
 * a zero gradient). The forward ops are in order, so one backward sweep from
 * the loss marks what it depends on. */
static void warn_unused(const Graph *g)
{
    char *used = xcalloc((size_t)g->nt, 1), *live = xcalloc((size_t)g->nt, 1);
    used[g->loss] = live[g->loss] = 1;   /* `minimize p`: a param as the loss */
    for (int i = g->nops - 1; i >= 0; i--) {
        const Op *op = &g->ops[i];
        int on = 0;
        for (int k = 0; k < op->nout; k++)
            on |= live[op->out[k]];
        for (int k = 0; k < op->nin; k++) {
            used[op->in[k]] = 1;
            live[op->in[k]] |= (char)on;
        }
    }
    for (int j = 0; j < g->ninputs + g->nparams; j++) {
        int param = j >= g->ninputs, t = param ? g->params[j - g->ninputs] : g->inputs[j];
        const char *what = param ? "param" : "input";
        const char *why = param ? " (it is stored and updated, with a zero gradient)" : "";
        if (!used[t])
            diag_warning(g->t[t].loc, "%s '%s' is never used%s", what, g->t[t].name, why);
        else if (!live[t])
            diag_warning(g->t[t].loc, "%s '%s' does not affect the loss%s", what, g->t[t].name, why);
    }
    free(used);
    free(live);
}

Graph *ir_build(Ast *ast, const BuildOptions *opt)
{
    int errors = diag_count();
    Builder b = {.ast = ast, .layer = -1, .prefix = "", .target = ""};
    b.g = graph_new(ast->file);
    b.g->config = opt->config ? opt->config : "";
    resolve_dims(&b, opt);
    if (diag_count() == errors)
        build_stmts(&b, ast->stmts, ast->nstmts);
    if (diag_count() == errors && b.g->loss < 0)
        diag_error((Loc){ast->file, 1, 1}, "the graph has no 'minimize' statement");
    if (diag_count() == errors)
        psrc_check_unique(b.g);
    if (diag_count() == errors)
        warn_unused(b.g);
    free(b.syms);
    for (size_t i = 0; i < b.capnames; i++)
        free(b.names[i]);
    free(b.names);
    if (diag_count() != errors) {
        graph_free(b.g);
        return NULL;
    }
    return b.g;
}
