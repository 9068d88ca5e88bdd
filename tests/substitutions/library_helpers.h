/*
 * library_helpers.h — what the tests of the shipped rule library share: the
 * library loaded per test (a checked fixture: load_library / free_library),
 * and a model's loss and weight gradients in the reference interpreter, to
 * compare a model with its rewrite. Include in one test file.
 */
#ifndef PCGC_TESTS_LIBRARY_HELPERS_H
#define PCGC_TESTS_LIBRARY_HELPERS_H

#include <check.h>
#include <string.h>

#include "reference.h"
#include "substitutions.h"

static pcgc_ruleset *lib;

static void load_library(void) {
  lib = pcgc_ruleset_new();
  pcgc_error err = {0};
  ck_assert_msg(pcgc_ruleset_load_dir(lib, PCGC_SOURCE_DIR "/rules", &err) == PCGC_OK, "%s:%d:%d: %s", err.file,
                err.line, err.col, err.message);
  ck_assert_int_gt(pcgc_ruleset_size(lib), 100);
}

static void free_library(void) {
  pcgc_ruleset_free(lib);
  lib = NULL;
}


/* Loss and every weight's gradient of g, one forward and backward. */
static void run(const pcgc_graph *g, double *loss, double *grads, int64_t cap, int64_t *n_grads) {
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = PCGC_F64;
  o.training = false;
  pcgc_error err = {0};
  pcgc_reference *r = pcgc_ref_new(g, &o, &err);
  ck_assert_msg(r != NULL, "%s", err.message);
  ck_assert_msg(pcgc_ref_forward(r, loss, &err) == PCGC_OK, "%s", err.message);
  ck_assert_msg(pcgc_ref_backward(r, &err) == PCGC_OK, "%s", err.message);
  /* weights in name order, so both graphs list them alike */
  const char *names[64];
  int nw = 0;
  for (int i = 0; i < g->n_nodes && nw < 64; i++)
    if (g->nodes[i].kind == PCGC_OP_WEIGHT) names[nw++] = g->nodes[i].name;
  for (int a = 0; a < nw; a++)
    for (int b = a + 1; b < nw; b++)
      if (strcmp(names[b], names[a]) < 0) {
        const char *t = names[a];
        names[a] = names[b];
        names[b] = t;
      }
  *n_grads = 0;
  for (int k = 0; k < nw; k++) {
    int id = pcgc_graph_find(g, names[k]);
    int64_t n = pcgc_ptensor_numel(&g->nodes[id].out[0]);
    ck_assert_int_le(*n_grads + n, cap);
    ck_assert_int_eq(pcgc_ref_get_grad(r, names[k], PCGC_F64, grads + *n_grads, n, &err), PCGC_OK);
    *n_grads += n;
  }
  pcgc_ref_free(r);
}

#endif
