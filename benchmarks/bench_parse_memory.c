/*
 * bench_parse_memory.c — peak heap of the model and rule readers against the
 * size of their input (issue 17: at most 5x the text for large inputs).
 *
 *   bench_parse_memory [--mb N] [--only TEXT] [--write DIR]
 *
 * Generates each input in memory (about N MB, default 10, on one line),
 * parses it and prints: the input's size; the peak heap during the call,
 * counted from just before it (the text itself, owned by the caller, is not
 * included); that peak over the size (the ratio the issue bounds); and what
 * the result keeps after the call (the graph, or the rule set with its copy
 * of the text), so a case whose peak is the result itself, not the reader,
 * shows as such. For models, "tree" is the peak of parsing alone (tokens and
 * the syntax tree of each statement, dropped once read as the builder drops
 * it once run; no graph). The heap is
 * counted exactly by replacing malloc and friends (glibc's documented way);
 * each case runs in a child process, whose maximum resident set growth is
 * printed too as a cross-check. --write DIR also saves the inputs, for
 * `/usr/bin/time -v pcgc check FILE` and the like.
 *
 * Cases (each input is one line):
 *   model-consts  `const cN = (cM + 7) * 3 % 1000 - 2;` repeated, then one op
 *   model-ops     `yN = relu(yM);` up to the node limit (100,000 nodes)
 *   model-lists   `yN = reshape(yM, shape=[2, 4, 8, 2]); ...` (list attributes)
 *   model-lexerr  model-consts with a stray '$' at the very end (the lexer's
 *                 error comes after reading everything)
 *   names-ops     model-ops with names long enough that the node limit fills
 *                 the size: the most nodes an input of that size can hold
 *   names-scalars the same with a different attribute on every node
 *                 (`scalar_mul` by N.5), so no two nodes share attributes
 *   names-linear  the same with `linear(yM, out=4)`: three nodes (the layer,
 *                 its weight and its bias) and three names a statement
 *   names-splits  splits into 16 up to the tensor limit (100,000 outputs),
 *                 names padded to fill the size
 *   rules-many    small rules up to the rule limit (10,000; each rule is
 *                 packed to what it holds, ~1 KB for these)
 *   rules-chains  rules up to the rule limit, each a chain of relus long
 *                 enough that they fill the size (the most rules it can hold)
 *   rules-big     rules with 31 long `where` conditions (~4000 expressions a rule)
 *   rules-dense   the same with the densest conditions the language takes:
 *                 `N*M+N*M+...` without spaces, one expression a byte
 *   rules-distinct conditions that share the least: `A+10+11+...` chains
 *                 of two-digit numbers, each condition from another start
 *   rules-lexerr  rules-big with a stray '$' at the very end
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model_internal.h" /* the syntax tree alone, for the breakdown */
#include "pcg.h"
#include "substitutions.h"

/* ------------------------------------------------------- heap counting */

#if defined(__SANITIZE_ADDRESS__)
#define COUNTING 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define COUNTING 0
#endif
#endif
#ifndef COUNTING
#define COUNTING 1
#endif

static size_t heap_now, heap_peak;

#if COUNTING
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static void *counted(void *p) {
  if (p) {
    heap_now += malloc_usable_size(p);
    if (heap_now > heap_peak) heap_peak = heap_now;
  }
  return p;
}
void *malloc(size_t n) { return counted(__libc_malloc(n)); }
void *calloc(size_t n, size_t m) { return counted(__libc_calloc(n, m)); }
void free(void *p) {
  if (p) heap_now -= malloc_usable_size(p);
  __libc_free(p);
}
void *realloc(void *p, size_t n) {
  size_t old = p ? malloc_usable_size(p) : 0;
  void *q = __libc_realloc(p, n);
  if (q || n == 0) heap_now -= old;
  return counted(q);
}
void *memalign(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { return counted(__libc_memalign(a, n)); }
int posix_memalign(void **out, size_t a, size_t n) {
  void *p = counted(__libc_memalign(a, n));
  if (!p) return 12; /* ENOMEM */
  *out = p;
  return 0;
}
#endif

/* ------------------------------------------------------------- inputs */

typedef struct buf {
  char *s;
  size_t n, cap;
} buf;

static void put(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(buf *b, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (k >= 0 && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    b->cap = b->cap ? b->cap * 2 : 1 << 20;
    b->s = realloc(b->s, b->cap);
    if (!b->s) abort();
  }
}

static void model_consts(buf *b, size_t size) {
  put(b, "model consts; const c0 = 1;");
  for (int i = 1; b->n < size; i++) put(b, " const c%d = (c%d + 7) * 3 %% 1000 - 2;", i, i / 2);
  put(b, " input x: f32[4, 8]; y = relu(x)\n");
}

static void model_ops(buf *b, size_t size) {
  put(b, "model ops; input x: f32[4, 8]; y0 = relu(x);");
  for (int i = 1; b->n < size && i < 99990; i++) put(b, " y%d = relu(y%d);", i, i - 1);
  put(b, "\n");
}

static void model_lists(buf *b, size_t size) {
  put(b, "model lists; input x: f32[8, 16]; y0 = reshape(x, shape=[2, 4, 8, 2]);");
  for (int i = 1; b->n < size && i < 99990; i++)
    put(b, " y%d = reshape(y%d, shape=[%d, 4, %d, 2]);", i, i - 1, i % 2 ? 4 : 2, i % 2 ? 4 : 8);
  put(b, "\n");
}

/* Statements up to the node limit (100,000), their names padded so that
 * they fill `size`: a model of that size can hold no more nodes. */
static void padded(buf *b, size_t size, int nodes_per_stmt, const char *op, const char *args) {
  int stmts = 99990 / nodes_per_stmt, w = 1;
  char a[64];
  snprintf(a, sizeof a, args, stmts - 1);
  size_t fixed = 9 + strlen(op) + strlen(a); /* " y = op(y" ");" and the arguments */
  if (size / (size_t)stmts > fixed + 2) w = (int)((size / (size_t)stmts - fixed) / 2);
  if (w > 200) w = 200;
  put(b, "model names; input x: f32[4, 4]; y%0*d = relu(x);", w, 0);
  for (int i = 1; i < stmts; i++) {
    put(b, " y%0*d = %s(y%0*d", w, i, op, w, i - 1);
    put(b, args, i);
    put(b, ");");
  }
  put(b, "\n");
}

static void names_ops(buf *b, size_t size) { padded(b, size, 1, "relu", ""); }
static void names_scalars(buf *b, size_t size) { padded(b, size, 1, "scalar_mul", ", scalar=%d.5"); }
static void names_linear(buf *b, size_t size) { padded(b, size, 3, "linear", ", out=4"); }

static void names_splits(buf *b, size_t size) {
  int stmts = 99990 / 16, w = 1;
  size_t fixed = 16 * 5 + 80; /* ", s_k" a name; " = split(x, axis=1, sizes=[...]);" */
  if (size / (size_t)stmts > fixed + 32) w = (int)((size / (size_t)stmts - fixed) / 16);
  if (w > 200) w = 200;
  put(b, "model splits; input x: f32[4, 32];");
  for (int i = 0; i < stmts; i++) {
    for (int k = 0; k < 16; k++) put(b, "%ss%0*d_%x", k ? ", " : " ", w, i, k);
    put(b, " = split(x, axis=1, sizes=[2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]);");
  }
  put(b, "\n");
}

static void model_lexerr(buf *b, size_t size) {
  model_consts(b, size);
  b->n--; /* the newline */
  put(b, " $\n");
}

static void rules_many(buf *b, size_t size) {
  for (int i = 0; b->n < size && i < 10000; i++)
    put(b, "rule r%d { match { input x: [...S]; y = relu(x); z = relu(y); yield z; } "
           "rewrite { w = relu(x); yield w; } } ",
        i);
  put(b, "\n");
}

/* Rules up to the rule limit (10,000), each the longest match the rule
 * language takes (16 nodes) and a rewrite as long, names padded so that
 * they fill `size`: a rule file of that size can hold no more. */
static void rules_chains(buf *b, size_t size) {
  for (int w = 1; w <= 100; w++) { /* the widest names that keep it within the size */
    size_t start = b->n;
    for (int i = 0; i < 10000; i++) {
      put(b, "rule r%d { match { input x: [...S]; m%0*d = relu(x); ", i, w, 0);
      for (int k = 1; k < 16; k++) put(b, "m%0*d = relu(m%0*d); ", w, k, w, k - 1);
      put(b, "yield m%0*d; } rewrite { w%0*d = relu(x); ", w, 15, w, 0);
      for (int k = 1; k < 16; k++) put(b, "w%0*d = relu(w%0*d); ", w, k, w, k - 1);
      put(b, "yield w%0*d; } } ", w, 15);
    }
    if (b->n - start + 10000 * 64 > size || w == 100) break; /* one more digit: 64 bytes a rule */
    b->n = start;
  }
  put(b, "\n");
}

/* Long conditions: a balanced sum of N (+ 1) terms has height log2, within
 * the depth limit, and 2 terms' worth of expressions per term. */
static void balanced(buf *b, int depth) {
  if (depth == 0) {
    put(b, "N");
    return;
  }
  put(b, "(");
  balanced(b, depth - 1);
  put(b, " + ");
  balanced(b, depth - 1);
  put(b, ")");
}

/* Rules up to the size (or the rule limit) of one relu each, with n_conds
 * conditions written by cond(b, rule, condition) on the dims of x. */
static void rules_where(buf *b, size_t size, const char *dims, int n_conds, void (*cond)(buf *b, int i, int c)) {
  for (int i = 0; b->n < size && i < 10000; i++) {
    put(b, "rule r%d { match { input x: [%s]; y = relu(x); yield y; } where {", i, dims);
    for (int c = 0; c < n_conds; c++) {
      cond(b, i, c);
      put(b, ">=0;");
    }
    put(b, " } rewrite { w = relu(x); yield w; } } ");
  }
  put(b, "\n");
}

static void big_cond(buf *b, int i, int c) {
  put(b, " ");
  balanced(b, 6); /* 64 terms, 127 expressions */
  put(b, " ");
}

/* 32 products: 63 deep, within the depth limit */
static void dense_cond(buf *b, int i, int c) {
  put(b, " N*M");
  for (int k = 1; k < 32; k++) put(b, "+N*M");
}

/* 62 terms: 62 deep, within the depth limit; each condition from another start */
static void distinct_cond(buf *b, int i, int c) {
  put(b, " %c", 'A' + (c + i) % 6);
  for (int k = 0; k < 61; k++) put(b, "+%d", 10 + (c * 7 + i + k) % 90);
}

static void rules_big(buf *b, size_t size) { rules_where(b, size, "N, M", 31, big_cond); }
static void rules_dense(buf *b, size_t size) { rules_where(b, size, "N, M", 31, dense_cond); }
static void rules_distinct(buf *b, size_t size) { rules_where(b, size, "A, B, C, D, E, F", 32, distinct_cond); }

static void rules_lexerr(buf *b, size_t size) {
  rules_big(b, size);
  b->n--;
  put(b, " $\n");
}

/* --------------------------------------------------------------- cases */

typedef struct bench_case {
  const char *name;
  bool rules;
  void (*gen)(buf *b, size_t size);
  bool fails; /* the input is invalid on purpose */
} bench_case;

static const bench_case cases[] = {
    {"model-consts", false, model_consts, false}, {"model-ops", false, model_ops, false},
    {"model-lists", false, model_lists, false},   {"model-lexerr", false, model_lexerr, true},
    {"names-ops", false, names_ops, false},       {"names-scalars", false, names_scalars, false},
    {"names-linear", false, names_linear, false}, {"names-splits", false, names_splits, false},
    {"rules-many", true, rules_many, false},      {"rules-big", true, rules_big, false},
    {"rules-chains", true, rules_chains, false},  {"rules-dense", true, rules_dense, false},
    {"rules-distinct", true, rules_distinct, false},
    {"rules-lexerr", true, rules_lexerr, true},
};

static long maxrss_kb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

/* In a child: generate, parse, print one line. */
static int run_case(const bench_case *c, size_t size, const char *dir) {
  buf b = {0};
  c->gen(&b, size);
  if (dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, c->name, c->rules ? "rules" : "pcg");
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b.s, 1, b.n, f) != b.n || fclose(f) != 0) {
      fprintf(stderr, "cannot write %s\n", path);
      return 1;
    }
  }
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_ruleset *rs = c->rules ? pcgc_ruleset_new() : NULL;
  long rss0 = maxrss_kb();
  size_t base = heap_now;
  heap_peak = heap_now;
  bool ok;
  pcgc_graph *g = NULL;
  if (c->rules) {
    ok = pcgc_ruleset_parse(rs, b.s, b.n, c->name, &err) == PCGC_OK;
  } else {
    g = pcgc_model_parse(b.s, b.n, c->name, NULL, &err);
    ok = g != NULL;
  }
  size_t peak = heap_peak - base, kept = heap_now - base;
  long rss = maxrss_kb() - rss0;
  if (ok == c->fails) {
    fprintf(stderr, "%s: unexpected %s\n", c->name, ok ? "success" : "failure");
    if (!ok) pcgc_error_print(stderr, &err);
    return 1;
  }
  char tree[64] = "";
  if (!c->rules && COUNTING) {
    pcgc__src src = {b.s, b.n, c->name, &err};
    size_t base2 = heap_now;
    heap_peak = heap_now;
    pcgc__model_check_syntax(&src);
    snprintf(tree, sizeof tree, "   tree %7.1f MB %5.1fx", (double)(heap_peak - base2) / 1e6,
             (double)(heap_peak - base2) / (double)b.n);
  }
  double mb = (double)b.n / 1e6;
  if (COUNTING)
    printf("%-14s %6.2f MB  peak %7.1f MB %5.1fx   kept %7.1f MB %5.1fx   rss +%7.1f MB%s\n", c->name, mb,
           (double)peak / 1e6, (double)peak / (double)b.n, (double)kept / 1e6, (double)kept / (double)b.n,
           (double)rss / 1e3, tree);
  else
    printf("%-14s %7.2f MB  rss +%7.1f MB  %5.1fx\n", c->name, mb, (double)rss / 1e3,
           (double)rss * 1e3 / (double)b.n);
  pcgc_graph_free(g);
  pcgc_ruleset_free(rs);
  free(b.s);
  return 0;
}

int main(int argc, char **argv) {
  double mb = 10;
  const char *only = NULL, *dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc) mb = atof(argv[++i]);
    else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[++i];
    else if (strcmp(argv[i], "--write") == 0 && i + 1 < argc) dir = argv[++i];
    else {
      fprintf(stderr, "usage: bench_parse_memory [--mb N] [--only TEXT] [--write DIR]\n");
      return 2;
    }
  }
  if (mb <= 0) mb = 10;
  printf("peak heap of one call over the input size (the text itself not counted); kept: what the\n"
         "result holds after the call; rss: the child's maximum resident set growth%s\n\n",
         COUNTING ? "" : " (heap counting is off under sanitizers)");
  int rc = 0;
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    if (only && !strstr(cases[i].name, only)) continue;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      int crc = run_case(&cases[i], (size_t)(mb * 1e6), dir);
      fflush(stdout);
      _exit(crc);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
  }
  return rc;
}
