/* ast.c — AST memory (a pool freed at once) and the parse entry points. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "parser.h"
#include "lexer.h"

/* A pool: a list of blocks, each allocation carved from the newest block. */
typedef struct Block { struct Block *next; size_t used, cap; } Block;
struct AstPool { Block *head; };

void *ast_alloc(struct AstPool *pool, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    Block *b = pool->head;
    if (!b || b->used + n > b->cap) {
        size_t cap = n > 65536 ? n : 65536;
        b = xmalloc(sizeof(Block) + 16 + cap);
        b->next = pool->head;
        b->used = 0;
        b->cap = cap;
        pool->head = b;
    }
    void *p = (char *)(b + 1) + 16 + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *ast_strdup(struct AstPool *pool, const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(ast_alloc(pool, n), s, n);
}

/* Room for element n of a pool array of n elements made by this function:
 * the capacity is the next power of two (at least 4), so a new block (the
 * old one stays in the pool) is taken only when n is 0 or a power of two
 * >= 4, and n pushes cost O(n) time and memory. The array moves then. */
void *ast_grow(struct AstPool *pool, void *arr, int n, size_t elem)
{
    if (n > (1 << 28))
        IR_BUG("AST list of %d items", n);
    if (n != 0 && (n < 4 || (n & (n - 1)) != 0))
        return arr;
    size_t cap = n < 4 ? 4 : 2 * (size_t)n;
    void *a = ast_alloc(pool, cap * elem);
    if (n)
        memcpy(a, arr, (size_t)n * elem);
    return a;
}

/* Appends item to the pool-allocated array *arr of *n items. */
void ast_push(struct AstPool *pool, void ***arr, int *n, void *item)
{
    void **a = ast_grow(pool, *arr, *n, sizeof *a);
    a[*n] = item;
    *arr = a;
    (*n)++;
}

/* ---- nesting depth (checked without recursion, before anything recurses) ---- */

typedef struct Visit { const Expr *e; const Stmt *s; int depth; } Visit;

static void visit_push(Visit **st, int *n, int *cap, Visit v)
{
    if (*n == *cap) {       /* a local stack (no pointer into it is held): plain doubling */
        *cap = *cap ? 2 * *cap : 256;
        *st = xrealloc(*st, (size_t)*cap * sizeof **st);
    }
    (*st)[(*n)++] = v;
}

/* Reports the first expression or statement nested deeper than
 * AST_MAX_DEPTH (the IR builder evaluates expressions recursively). */
static void check_depth(const Ast *ast)
{
    Visit *st = NULL;
    int n = 0, cap = 0;
    for (int i = 0; i < ast->nstmts; i++)
        visit_push(&st, &n, &cap, (Visit){NULL, ast->stmts[i], 1});
    while (n) {
        Visit v = st[--n];
        if (v.depth > AST_MAX_DEPTH) {
            diag_error(v.e ? v.e->loc : v.s->loc, "nested more than %d levels deep", AST_MAX_DEPTH);
            break;
        }
        int d = v.depth + 1;
        if (v.e) {
            const Expr *e = v.e;
            if (e->a) visit_push(&st, &n, &cap, (Visit){e->a, NULL, d});
            if (e->b) visit_push(&st, &n, &cap, (Visit){e->b, NULL, d});
            for (int k = 0; k < e->nargs; k++)
                visit_push(&st, &n, &cap, (Visit){e->args[k], NULL, d});
            continue;
        }
        const Stmt *s = v.s;
        if (s->value) visit_push(&st, &n, &cap, (Visit){s->value, NULL, d});
        for (int k = 0; k < s->type.ndims; k++)
            visit_push(&st, &n, &cap, (Visit){s->type.dims[k], NULL, d});
        for (int k = 0; k < s->nnames && s->values; k++)
            if (s->values[k])
                visit_push(&st, &n, &cap, (Visit){s->values[k], NULL, d});
        for (int k = 0; k < s->nbody; k++)
            visit_push(&st, &n, &cap, (Visit){NULL, s->body[k], d});
    }
    free(st);
}

/* File names live for the whole run (locations point at them). */
const char *ast_intern_file(const char *name)
{
    static char *names[64];
    static int n;
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return names[i];
    char *s = xstrdup(name);
    if (n < 64)
        names[n++] = s;
    return s;
}

Ast *parse_string(const char *name, const char *text, size_t len)
{
    name = ast_intern_file(name);
    diag_add_source(name, text, len);
    Ast *ast = xcalloc(1, sizeof *ast);
    ast->file = name;
    ast->pool = xcalloc(1, sizeof *ast->pool);
    struct LexState ls = {.file = name, .line = 1, .col = 1, .pool = ast->pool, .ast = ast};
    yyscan_t scanner;
    if (yylex_init_extra(&ls, &scanner) != 0)
        IR_BUG("yylex_init failed");
    YY_BUFFER_STATE buf = yy_scan_bytes(text, (int)len, scanner);
    yyparse(scanner, &ls);
    yy_delete_buffer(buf, scanner);
    yylex_destroy(scanner);
    check_depth(ast);
    return ast;
}

Ast *parse_file(const char *path)
{
    char err[4200];
    size_t len;
    char *text = read_regular_file(path, GC_GRAPH_FILE_LIMIT, &len, err, sizeof err);
    if (!text) {
        diag_error((Loc){0}, "%s", err);
        return NULL;
    }
    /* the text stays alive: diagnostics print source lines from it */
    return parse_string(path, text, len);
}

void ast_free(Ast *ast)
{
    if (!ast)
        return;
    for (Block *b = ast->pool->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(ast->pool);
    free(ast);
}
