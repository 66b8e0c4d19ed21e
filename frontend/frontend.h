/* frontend.h — the graph DSL: lexer (lexer.l), parser (parser.y) and AST (ast.c).
 *
 * The grammar is documented in docs/grammar.md. Grammar actions only build
 * the AST; every check runs later in ir/build.c with the locations kept here.
 * Statements end at a newline; newlines inside ( ) and [ ] are ignored.
 */
#ifndef GC_FRONTEND_H
#define GC_FRONTEND_H

#include "ir.h"

typedef enum ExprKind { E_INT, E_FLOAT, E_NAME, E_BINOP, E_NEG, E_CALL, E_INDEX, E_LIST } ExprKind;

/* Binary operators beyond single characters ('+', '-', '*', '/', '%', '<', '>'). */
enum { BIN_EQ = 256, BIN_NE, BIN_LE, BIN_GE };

typedef struct Expr Expr;
struct Expr {
    ExprKind kind;
    Loc loc;
    long ival;          /* E_INT */
    double fval;        /* E_FLOAT */
    char *name;         /* E_NAME, E_CALL (callee) */
    int op;             /* E_BINOP */
    Expr *a, *b;        /* E_BINOP operands; E_NEG a; E_INDEX a[b] */
    Expr **args;        /* E_CALL arguments, E_LIST items */
    char **kw;          /* E_CALL: keyword of each argument or NULL */
    Loc *kwloc;
    int nargs;
};

typedef struct TypeExpr {
    char *dtype;
    Loc loc;
    Expr **dims;
    int ndims;
} TypeExpr;

/* A param's `from "NAME" [transposed] [[dims]]`: where its values live in a
 * safetensors checkpoint (ir/psource.c). */
typedef struct FromClause {
    char *name;         /* the string's text, without the quotes */
    Loc loc;            /* the string */
    char **alts;        /* `| "…"` after it: names tried in turn when a file lacks the first */
    Loc *alt_locs;
    int nalts;
    int transposed;
    int has_shape;      /* the stored shape below was given */
    TypeExpr shape;     /* dims only (dtype NULL) */
} FromClause;

typedef enum StmtKind {
    S_DIM, S_CONFIG, S_REQUIRE, S_INPUT, S_PARAM, S_ASSIGN, S_FOR, S_MINIMIZE, S_OPTIMIZER
} StmtKind;

typedef struct Stmt Stmt;
struct Stmt {
    StmtKind kind;
    Loc loc;            /* the statement's first token */
    char *name;         /* dim, config, input, param, for variable, minimize target */
    Loc name_loc;
    Expr *value;        /* dim default, require condition, param init, assign rhs, optimizer call */
    TypeExpr type;      /* input, param */
    int nodecay;        /* param: how often `nodecay` was written */
    Loc nodecay_loc;    /* param: the last one */
    FromClause *from;   /* param: the first `from`, or NULL */
    int nfrom;          /* param: how many were written */
    Loc from_loc;       /* param: the last `from` */
    char **names;       /* assign targets; config keys */
    Loc *name_locs;
    Expr **values;      /* config values */
    int nnames;
    char *range;        /* for: the dim iterated over */
    Loc range_loc;
    Stmt **body;        /* for */
    int nbody;
};

typedef struct Ast {
    const char *file;
    Stmt **stmts;
    int nstmts;
    struct AstPool *pool;
} Ast;

/* ---------------------------------------------------------------- ast.c */
/* Reads and parses a file. Syntax errors and nesting deeper than
 * AST_MAX_DEPTH are reported (located) and counted
 * by diag; the AST of the statements that parsed is returned anyway, NULL only
 * when the file cannot be read. */
/* A graph file is at most this many bytes (docs/grammar.md); a larger one,
 * or one that is not a regular file (a FIFO, /dev/zero), is an error. */
#define GC_GRAPH_FILE_LIMIT ((size_t)64 << 20)
Ast *parse_file(const char *path);
/* Same from memory; `name` is used in locations. */
Ast *parse_string(const char *name, const char *text, size_t len);
void ast_free(Ast *ast);

/* used by the parser */
void *ast_alloc(struct AstPool *pool, size_t n);
char *ast_strdup(struct AstPool *pool, const char *s);
void ast_push(struct AstPool *pool, void ***arr, int *n, void *item);
void *ast_grow(struct AstPool *pool, void *arr, int n, size_t elem);
/* Deepest nesting of expressions and statements a graph may have (the IR
 * builder recurses); deeper is a located error after parsing. */
#define AST_MAX_DEPTH 200
const char *ast_intern_file(const char *name);

#endif
