/* parser.y — grammar of the graph DSL (docs/grammar.md). Actions only build
 * the AST; checks run in ir/build.c. A syntax error skips to the end of its
 * line, so several errors are reported in one run. */
%require "3.8"
%define api.pure full
%define parse.error detailed
%define parse.lac full
%locations
%expect 0
%param {yyscan_t scanner}
%parse-param {struct LexState *ls}

%code requires {
#include "frontend.h"
typedef void *yyscan_t;
struct LexState {
    const char *file;
    int line, col;
    int depth;          /* open ( and [ */
    Loc open[64];       /* where the outermost 64 of them opened */
    char openc[64];     /* and which ('(' or '[') */
    int last;           /* first byte of the last token (not blank, comment or newline) */
    int last_nl;        /* the last token returned was NL */
    Loc unclosed_nl;    /* the NL the lexer put after a bracket it reported unclosed */
    Loc loc;            /* start of the current token */
    struct AstPool *pool;
    Ast *ast;
};
}

%code {
#include <stdlib.h>
#include <string.h>
#include "lexer.h"

static void yyerror(YYLTYPE *loc, yyscan_t scanner, struct LexState *ls, const char *msg);
static Loc L(struct LexState *ls, YYLTYPE l) { return (Loc){ls->file, l.first_line, l.first_column}; }
static Expr *mk(struct LexState *ls, ExprKind k, YYLTYPE l)
{
    Expr *e = ast_alloc(ls->pool, sizeof *e);
    e->kind = k;
    e->loc = L(ls, l);
    return e;
}
static Expr *binop(struct LexState *ls, int op, Expr *a, Expr *b, YYLTYPE l)
{
    Expr *e = mk(ls, E_BINOP, l);
    e->op = op;
    e->a = a;
    e->b = b;
    return e;
}
static Stmt *stmt(struct LexState *ls, StmtKind k, YYLTYPE l)
{
    Stmt *s = ast_alloc(ls->pool, sizeof *s);
    s->kind = k;
    s->loc = L(ls, l);
    return s;
}
/* appends an argument (keyword may be NULL) to a call */
static void add_arg(struct LexState *ls, Expr *call, const char *kw, Loc kwloc, Expr *arg)
{
    int n = call->nargs;
    ast_push(ls->pool, (void ***)&call->args, &n, arg);
    n = call->nargs;
    ast_push(ls->pool, (void ***)&call->kw, &n, (void *)kw);
    Loc *locs = ast_grow(ls->pool, call->kwloc, call->nargs, sizeof *locs);
    locs[call->nargs] = kwloc;
    call->kwloc = locs;
    call->nargs++;
}
static void add_name(struct LexState *ls, Stmt *s, const char *name, Loc loc, Expr *value)
{
    int n = s->nnames;
    ast_push(ls->pool, (void ***)&s->names, &n, (void *)name);
    n = s->nnames;
    ast_push(ls->pool, (void ***)&s->values, &n, value);
    Loc *locs = ast_grow(ls->pool, s->name_locs, s->nnames, sizeof *locs);
    locs[s->nnames] = loc;
    s->name_locs = locs;
    s->nnames++;
}
}

%union {
    long ival;
    double fval;
    char *str;
    Expr *expr;
    Stmt *stmt;
    struct { Stmt **v; int n; } stmts;
    TypeExpr type;
    struct FromClause *from;
}

%token NL "newline"
%token DIM "dim" CONFIG "config" REQUIRE "require" INPUT "input" PARAM "param"
%token FOR "for" IN "in" MINIMIZE "minimize" OPTIMIZER "optimizer" NODECAY "nodecay"
%token FROM "from" TRANSPOSED "transposed"
%token EQ "==" NE "!=" LE "<=" GE ">="
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token <str> IDENT "name"
%token <str> STRING "string"

%type <expr> expr call args list_items opt_init
%type <stmt> stmt config_body targets param_mods
%type <stmts> stmts
%type <type> type dims
%type <ival> opt_transposed
%type <from> from_names

%nonassoc EQ NE '<' '>' LE GE
%left '+' '-'
%left '*' '/' '%'
%precedence NEG
%precedence '['

%%

/* program = line* */
program
    : stmts                     { ls->ast->stmts = $1.v; ls->ast->nstmts = $1.n; }
    ;

/* line = stmt NL | NL ; a bad line is skipped to its newline */
stmts
    : %empty                    { $$.v = NULL; $$.n = 0; }
    | stmts NL                  { $$ = $1; }
    | stmts stmt NL             { $$ = $1; ast_push(ls->pool, (void ***)&$$.v, &$$.n, $2); }
    | stmts error NL            { $$ = $1; yyerrok; }
    ;

stmt
    /* dim NAME = expr */
    : DIM IDENT '=' expr        { $$ = stmt(ls, S_DIM, @1); $$->name = $2; $$->name_loc = L(ls, @2); $$->value = $4; }
    /* config NAME { (NAME = expr)[,|NL]* } */
    | CONFIG IDENT '{' config_body '}'
                                { $$ = $4; $$->loc = L(ls, @1); $$->name = $2; $$->name_loc = L(ls, @2); }
    /* require expr */
    | REQUIRE expr              { $$ = stmt(ls, S_REQUIRE, @1); $$->value = $2; }
    /* input NAME : type */
    | INPUT IDENT ':' type      { $$ = stmt(ls, S_INPUT, @1); $$->name = $2; $$->name_loc = L(ls, @2); $$->type = $4; }
    /* param NAME : type [= init] (nodecay | from STRING ('|' STRING)* [transposed] ['[' dims ']'])* */
    | PARAM IDENT ':' type opt_init param_mods
                                { $$ = $6; $$->kind = S_PARAM; $$->loc = L(ls, @1); $$->name = $2;
                                  $$->name_loc = L(ls, @2); $$->type = $4; $$->value = $5; }
    /* NAME (, NAME)* = expr */
    | targets '=' expr          { $$ = $1; $$->value = $3; }
    /* for NAME in DIM { line* } */
    | FOR IDENT IN IDENT '{' stmts '}'
                                { $$ = stmt(ls, S_FOR, @1); $$->name = $2; $$->name_loc = L(ls, @2);
                                  $$->range = $4; $$->range_loc = L(ls, @4); $$->body = $6.v; $$->nbody = $6.n; }
    /* minimize NAME */
    | MINIMIZE IDENT            { $$ = stmt(ls, S_MINIMIZE, @1); $$->name = $2; $$->name_loc = L(ls, @2); }
    /* optimizer NAME(args) */
    | OPTIMIZER call            { $$ = stmt(ls, S_OPTIMIZER, @1); $$->value = $2; }
    ;

targets
    : IDENT                     { $$ = stmt(ls, S_ASSIGN, @1); add_name(ls, $$, $1, L(ls, @1), NULL); }
    | targets ',' IDENT         { $$ = $1; add_name(ls, $$, $3, L(ls, @3), NULL); }
    ;

config_body
    : %empty                    { $$ = stmt(ls, S_CONFIG, @$); }
    | config_body NL            { $$ = $1; }
    | config_body ','           { $$ = $1; }
    | config_body IDENT '=' expr
                                { $$ = $1; add_name(ls, $$, $2, L(ls, @2), $4); }
    ;

/* type = DTYPE '[' (expr (',' expr)*)? ']' */
type
    : IDENT '[' ']'             { memset(&$$, 0, sizeof $$); $$.dtype = $1; $$.loc = L(ls, @1); }
    | IDENT '[' dims ']'        { $$ = $3; $$.dtype = $1; $$.loc = L(ls, @1); }
    ;

dims
    : expr                      { memset(&$$, 0, sizeof $$); ast_push(ls->pool, (void ***)&$$.dims, &$$.ndims, $1); }
    | dims ',' expr             { $$ = $1; ast_push(ls->pool, (void ***)&$$.dims, &$$.ndims, $3); }
    ;

opt_init
    : %empty                    { $$ = NULL; }
    | '=' expr                  { $$ = $2; }
    ;

/* a param's modifiers; repeats are reported by ir/build.c */
param_mods
    : %empty                    { $$ = stmt(ls, S_PARAM, @$); }
    | param_mods NODECAY        { $$ = $1; $$->nodecay++; $$->nodecay_loc = L(ls, @2); }
    | param_mods FROM from_names opt_transposed
                                { $$ = $1; $$->from_loc = L(ls, @2);
                                  if (!$$->nfrom++) {
                                      $$->from = $3; $$->from->transposed = (int)$4;
                                  } }
    | param_mods FROM from_names opt_transposed '[' dims ']'
                                { $$ = $1; $$->from_loc = L(ls, @2);
                                  if (!$$->nfrom++) {
                                      $$->from = $3; $$->from->transposed = (int)$4;
                                      $$->from->has_shape = 1; $$->from->shape = $6; $$->from->shape.loc = L(ls, @5);
                                  } }
    ;

/* from_names = STRING ('|' STRING)* */
from_names
    : STRING                    { $$ = ast_alloc(ls->pool, sizeof *$$); $$->name = $1; $$->loc = L(ls, @1); }
    | from_names '|' STRING     { $$ = $1;
                                  int n = $$->nalts;
                                  ast_push(ls->pool, (void ***)&$$->alts, &n, $3);
                                  Loc *locs = ast_grow(ls->pool, $$->alt_locs, $$->nalts, sizeof *locs);
                                  locs[$$->nalts] = L(ls, @3);
                                  $$->alt_locs = locs;
                                  $$->nalts++; }
    ;

opt_transposed
    : %empty                    { $$ = 0; }
    | TRANSPOSED                { $$ = 1; }
    ;

expr
    : INT                       { $$ = mk(ls, E_INT, @1); $$->ival = $1; }
    | FLOAT                     { $$ = mk(ls, E_FLOAT, @1); $$->fval = $1; }
    | IDENT                     { $$ = mk(ls, E_NAME, @1); $$->name = $1; }
    | call                      { $$ = $1; }
    | '[' list_items ']'        { $$ = $2; $$->loc = L(ls, @1); }
    | '(' expr ')'              { $$ = $2; }
    | expr '[' expr ']'         { $$ = mk(ls, E_INDEX, @2); $$->a = $1; $$->b = $3; }
    | '-' expr %prec NEG        { $$ = mk(ls, E_NEG, @1); $$->a = $2; }
    | expr '+' expr             { $$ = binop(ls, '+', $1, $3, @2); }
    | expr '-' expr             { $$ = binop(ls, '-', $1, $3, @2); }
    | expr '*' expr             { $$ = binop(ls, '*', $1, $3, @2); }
    | expr '/' expr             { $$ = binop(ls, '/', $1, $3, @2); }
    | expr '%' expr             { $$ = binop(ls, '%', $1, $3, @2); }
    | expr '<' expr             { $$ = binop(ls, '<', $1, $3, @2); }
    | expr '>' expr             { $$ = binop(ls, '>', $1, $3, @2); }
    | expr EQ expr              { $$ = binop(ls, BIN_EQ, $1, $3, @2); }
    | expr NE expr              { $$ = binop(ls, BIN_NE, $1, $3, @2); }
    | expr LE expr              { $$ = binop(ls, BIN_LE, $1, $3, @2); }
    | expr GE expr              { $$ = binop(ls, BIN_GE, $1, $3, @2); }
    ;

/* call = NAME '(' (arg (',' arg)*)? ')' ; arg = expr | NAME '=' expr */
call
    : IDENT '(' ')'             { $$ = mk(ls, E_CALL, @1); $$->name = $1; }
    | IDENT '(' args ')'        { $$ = $3; $$->loc = L(ls, @1); $$->name = $1; }
    ;

args
    : expr                      { $$ = mk(ls, E_CALL, @1); add_arg(ls, $$, NULL, L(ls, @1), $1); }
    | IDENT '=' expr            { $$ = mk(ls, E_CALL, @1); add_arg(ls, $$, $1, L(ls, @1), $3); }
    | args ',' expr             { $$ = $1; add_arg(ls, $$, NULL, L(ls, @3), $3); }
    | args ',' IDENT '=' expr   { $$ = $1; add_arg(ls, $$, $3, L(ls, @3), $5); }
    ;

list_items
    : expr                      { $$ = mk(ls, E_LIST, @1); ast_push(ls->pool, (void ***)&$$->args, &$$->nargs, $1); }
    | list_items ',' expr       { $$ = $1; ast_push(ls->pool, (void ***)&$$->args, &$$->nargs, $3); }
    ;

%%

static void yyerror(YYLTYPE *loc, yyscan_t scanner, struct LexState *ls, const char *msg)
{
    (void)scanner;
    if (loc->first_line == ls->unclosed_nl.line && loc->first_column == ls->unclosed_nl.col)
        return;                                 /* that statement's error is the bracket, reported */
    if (!strcmp(msg, "memory exhausted"))     /* bison's stack: YYMAXDEPTH open constructs */
        msg = "nested too deeply (the parser's stack is full)";
    diag_error(L(ls, *loc), "%s", msg);
}
