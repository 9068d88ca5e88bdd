/*
 * train.c — `pcgc train`: trains a model on one CPU device with the
 * reference interpreter (runtime/reference) on seeded synthetic data, and
 * prints the loss per step. The same batch is used every step, so a working
 * model's loss visibly falls.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "reference.h"


void pcgc_cli_train_help(FILE *f) {
  fprintf(f,
          "usage: pcgc train MODEL [--steps N] [--batch B] [--seed S] [--optimizer sgd|adam]\n"
          "                        [--lr X] [--momentum M] [--weight-decay W] [--f64]\n"
          "                        [--no-dropout] [--set NAME=VALUE]...\n"
          "\n"
          "Trains MODEL on one CPU device with the reference interpreter: weights initialised\n"
          "from the model's init attributes, one batch of seeded synthetic data (floats N(0,1),\n"
          "ids and labels uniform over the table rows / classes), and prints the loss of each\n"
          "step. The model needs exactly one loss (softmax_cross_entropy or mse).\n"
          "\n"
          "options:\n"
          "  --steps N          training steps (default 10)\n"
          "  --batch B          batch size: the model's `const B` (it must define one), or an\n"
          "                     ONNX model's symbolic batch dim\n"
          "  --seed S           seed of weights, data and dropout (default 1)\n"
          "  --optimizer NAME   sgd (default) or adam\n"
          "  --lr X             learning rate (default 0.01 for sgd, 0.001 for adam)\n"
          "  --momentum M       SGD momentum (default 0)\n"
          "  --weight-decay W   L2 weight decay (default 0)\n"
          "  --f64              compute in double precision (default f32)\n"
          "  --no-dropout       disable dropout\n"
          "  --set NAME=VALUE   override a `const` of the model; repeatable\n"
          PCGC_CLI_LOSS_HELP
          "  -h, --help         show this help\n"
          "\n"
          "exit codes: 0 trained, 1 invalid model or the loss became NaN/Inf, 2 usage, 3 I/O\n");
}

static int parse_num(const char *flag, const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (!*s || *end || errno || !isfinite(v)) return pcgc_cli_usage_error("train", "bad number for %s", flag);
  *out = v;
  return -1;
}

int pcgc_cli_train(int argc, char **argv) {
  const char *model = NULL;
  pcgc_cli_sets sets = {0};
  int loss = -1; /* --loss: an op kind */
  double steps = 10, seed = 1, lr = -1, momentum = 0, wd = 0, batch = 0;
  bool adam = false, f64 = false, dropout = true;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
    int r = -1;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_train_help(stdout);
      return EXIT_OK;
    } else if (strcmp(a, "--f64") == 0) {
      f64 = true;
    } else if (strcmp(a, "--no-dropout") == 0) {
      dropout = false;
    } else if (a[0] == '-' && a[1]) {
      if (!val) return pcgc_cli_usage_error("train", "%s needs a value", a);
      i++;
      if (strcmp(a, "--steps") == 0) r = parse_num(a, val, &steps);
      else if (strcmp(a, "--seed") == 0) r = parse_num(a, val, &seed);
      else if (strcmp(a, "--lr") == 0) r = parse_num(a, val, &lr);
      else if (strcmp(a, "--momentum") == 0) r = parse_num(a, val, &momentum);
      else if (strcmp(a, "--weight-decay") == 0) r = parse_num(a, val, &wd);
      else if (strcmp(a, "--optimizer") == 0) {
        if (strcmp(val, "adam") == 0) adam = true;
        else if (strcmp(val, "sgd") != 0)
          return pcgc_cli_usage_error("train", "--optimizer must be sgd or adam, not '%s'", val);
      } else if (strcmp(a, "--batch") == 0) {
        if ((r = parse_num(a, val, &batch)) >= 0) return r;
        if (batch < 1 || batch != floor(batch) || batch > 1e9)
          return pcgc_cli_usage_error("train", "--batch must be a positive integer, not '%s'", val);
      } else if (strcmp(a, "--set") == 0) {
        r = pcgc_cli_add_set("train", val, &sets);
      } else if (strcmp(a, "--loss") == 0) {
        r = pcgc_cli_loss_kind("train", val, &loss);
      } else {
        return pcgc_cli_usage_error("train", "unknown option '%s'", a);
      }
      if (r >= 0) return r;
    } else if (!model) {
      model = a;
    } else {
      return pcgc_cli_usage_error("train", "unexpected argument '%s' (one MODEL only)", a);
    }
  }
  if (!model) return pcgc_cli_usage_error("train", "missing MODEL%s", "");
  if (steps < 0 || steps != floor(steps) || steps > 1e9) return pcgc_cli_usage_error("train", "--steps must be a non-negative integer%s", "");
  if (seed < 0 || seed != floor(seed)) return pcgc_cli_usage_error("train", "--seed must be a non-negative integer%s", "");
  if (lr == 0 || lr < -1 || momentum < 0 || wd < 0)
    return pcgc_cli_usage_error("train", "--lr must be positive and --momentum/--weight-decay not negative%s", "");

  int code = EXIT_OK;
  pcgc_graph *g = pcgc_cli_load(model, sets.n, sets.names, sets.values, (int64_t)batch, loss, &code);
  if (!g) return code;
  pcgc_ref_options o;
  pcgc_ref_options_default(&o);
  o.dtype = f64 ? PCGC_F64 : PCGC_F32;
  o.seed = (uint64_t)seed;
  o.training = dropout;
  pcgc_optimizer_default(&o.opt, adam ? PCGC_ADAM : PCGC_SGD);
  if (lr > 0) o.opt.lr = lr;
  o.opt.momentum = momentum;
  o.opt.weight_decay = wd;
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_reference *r = pcgc_ref_new(g, &o, &err);
  if (!r) {
    pcgc_error_print(stderr, &err);
    pcgc_graph_free(g);
    return pcgc_cli_exit_code(err.status);
  }
  printf("training %s on 1 CPU device: %s, lr %g, %s, seed %llu\n", model, adam ? "adam" : "sgd", o.opt.lr,
         f64 ? "f64" : "f32", (unsigned long long)o.seed);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long s = 1; s <= (long)steps; s++) {
    double loss;
    if (pcgc_ref_train_step(r, &loss, &err) != PCGC_OK) {
      fprintf(stderr, "step %ld: ", s);
      pcgc_error_print(stderr, &err);
      code = EXIT_INVALID;
      break;
    }
    printf("step %4ld  loss %.6f\n", s, loss);
    fflush(stdout);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (code == EXIT_OK && steps > 0)
    printf("%ld steps in %.3f s\n", (long)steps, (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  pcgc_ref_free(r);
  pcgc_graph_free(g);
  return code;
}
