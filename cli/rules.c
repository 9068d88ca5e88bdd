/*
 * rules.c — `pcgc rules check|list [PATH...]`: loads rule files (the shipped
 * library by default), checks every rule by execution, or lists the rules
 * with how many instances they have for a machine and a model.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "search.h"
#include "substitutions.h"

void pcgc_cli_rules_help(FILE *f) {
  fprintf(f,
          "usage: pcgc rules check [PATH...] [--seeds N] [--instances N] [--verbose]\n"
          "       pcgc rules list  [PATH...] [--machine M] [--model MODEL]\n"
          "\n"
          "Substitution rules (docs/rules.md). PATH is a .rules file or a folder of them; the\n"
          "default is the shipped library (%s).\n"
          "\n"
          "  check   runs both sides of every rule on random small-integer tensors in the\n"
          "          reference interpreter, forward and backward, for small instances that\n"
          "          satisfy its conditions (degrees 1, 2, 4; dims 0..3), and reports each rule\n"
          "          sound or not with the instance, seed and first differing element. Exit 1\n"
          "          when a rule is unsound or a file does not load.\n"
          "  list    prints every rule, its parameters and its number of instances for a\n"
          "          machine (degrees: the divisors >= 2 of its device count) and a model (dims\n"
          "          below its largest rank; 4 without --model), and the total.\n"
          "\n"
          "options:\n"
          "  --seeds N          random inputs per instance (default 3)\n"
          "  --instances N      instances per parameter binding (default 3)\n"
          "  --verbose          one line per instance checked\n"
          "  --machine M        machine preset or file for `list` (default dgx-h100)\n"
          "  --model MODEL      model for `list` (its largest rank bounds dim parameters)\n"
          "  -h, --help         show this help\n",
          pcgc_rules_default_dir());
}

static pcgc_status load_path(pcgc_ruleset *rs, const char *path, pcgc_error *err) {
  struct stat sb;
  if (stat(path, &sb) != 0) return pcgc_error_set(err, PCGC_ERR_IO, "cannot open '%s'", path);
  return S_ISDIR(sb.st_mode) ? pcgc_ruleset_load_dir(rs, path, err) : pcgc_ruleset_load_file(rs, path, err);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int positive(const char *cmd, const char *v, int *out) {
  char *end;
  long x = strtol(v, &end, 10);
  if (!*v || *end || x < 1 || x > 1000) return pcgc_cli_usage_error(cmd, "expected a number from 1 to 1000, not '%s'", v);
  *out = (int)x;
  return -1;
}

int pcgc_cli_rules(int argc, char **argv) {
  if (argc < 1) return pcgc_cli_usage_error("rules", "missing a subcommand (check or list)%s", "");
  const char *sub = argv[0];
  if (strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
    pcgc_cli_rules_help(stdout);
    return EXIT_OK;
  }
  bool check = strcmp(sub, "check") == 0;
  if (!check && strcmp(sub, "list") != 0)
    return pcgc_cli_usage_error("rules", "unknown subcommand '%s' (check or list)", sub);
  const char *paths[64], *machine = "dgx-h100", *model = NULL;
  int n_paths = 0, r;
  pcgc_check_options o;
  pcgc_check_options_default(&o);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pcgc_cli_rules_help(stdout);
      return EXIT_OK;
    } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
      o.log = stdout;
    } else if (a[0] == '-' && a[1] && !v) {
      return pcgc_cli_usage_error("rules", "%s needs a value", a);
    } else if (strcmp(a, "--seeds") == 0) {
      if ((r = positive("rules", argv[++i], &o.seeds)) >= 0) return r;
    } else if (strcmp(a, "--instances") == 0) {
      if ((r = positive("rules", argv[++i], &o.instances)) >= 0) return r;
    } else if (strcmp(a, "--machine") == 0) {
      machine = argv[++i];
    } else if (strcmp(a, "--model") == 0) {
      model = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      return pcgc_cli_usage_error("rules", "unknown option '%s'", a);
    } else if (n_paths < 64) {
      paths[n_paths++] = a;
    } else {
      return pcgc_cli_usage_error("rules", "too many paths (at most 64)%s", "");
    }
  }
  if (n_paths == 0) paths[n_paths++] = pcgc_rules_default_dir();
  pcgc_error err;
  pcgc_error_clear(&err);
  pcgc_ruleset *rs = pcgc_ruleset_new();
  if (!rs) {
    fprintf(stderr, "pcgc rules: out of memory\n");
    return EXIT_INTERNAL;
  }
  double t0 = now();
  pcgc_status st = PCGC_OK;
  for (int i = 0; i < n_paths && st == PCGC_OK; i++) st = load_path(rs, paths[i], &err);
  double t_load = now() - t0;
  int code = EXIT_OK;
  if (st != PCGC_OK) {
    pcgc_error_print(stderr, &err);
    pcgc_ruleset_free(rs);
    return pcgc_cli_exit_code(st);
  }
  int total = pcgc_ruleset_size(rs);
  if (check) {
    int unsound = 0;
    int64_t runs = 0;
    t0 = now();
    st = pcgc_ruleset_verify(rs, &o, true, stdout, &unsound, &runs, &err);
    double t_check = now() - t0;
    if (st != PCGC_OK) {
      pcgc_error_print(stderr, &err);
      code = pcgc_cli_exit_code(st);
    } else {
      printf("%d rules: %d sound, %d unsound; %lld executions; loaded in %.3f s, checked in %.3f s\n", total,
             total - unsound, unsound, (long long)runs, t_load, t_check);
      if (unsound) code = EXIT_INVALID;
    }
  } else {
    pcgc_machine m;
    if ((st = pcgc_machine_load(machine, &m, &err)) != PCGC_OK) {
      pcgc_error_print(stderr, &err);
      pcgc_ruleset_free(rs);
      return pcgc_cli_exit_code(st);
    }
    int max_rank = 4;
    if (model) {
      pcgc_graph *g = pcgc_cli_load(model, 0, NULL, NULL, 0, -1, &code);
      if (!g) {
        pcgc_ruleset_free(rs);
        return code;
      }
      max_rank = pcgc_rules_max_rank(g);
      pcgc_graph_free(g);
    }
    int64_t deg[64];
    int devices = m.nodes * m.devices_per_node;
    int nd = pcgc_rules_machine_degrees(devices, deg, 64);
    pcgc_rule_inst *ri = NULL;
    int n = 0;
    if ((st = pcgc_ruleset_instantiate(rs, deg, nd, max_rank, &ri, &n, &err)) != PCGC_OK) {
      pcgc_error_print(stderr, &err);
      code = pcgc_cli_exit_code(st);
    } else {
      for (int i = 0; i < total; i++) {
        const pcgc_rule *rule = pcgc_ruleset_rule(rs, i);
        int cnt = 0;
        for (int k = 0; k < n; k++) cnt += ri[k].rule == rule;
        char params[128] = "";
        size_t used = 0;
        for (int p = 0; p < pcgc_rule_num_params(rule) && used < sizeof params; p++) {
          int w = snprintf(params + used, sizeof params - used, "%s%s: %s", p ? ", " : "", pcgc_rule_param_name(rule, p),
                           pcgc_rule_param_is_degree(rule, p) ? "degree" : "dim");
          if (w > 0) used += (size_t)w;
        }
        printf("%-40s %4d  (%s)\n", pcgc_rule_name(rule), cnt, params);
      }
      printf("%d rules, %d instances for %s (%d devices: %d degrees) and rank %d\n", total, n, m.name, devices, nd,
             max_rank);
    }
    free(ri);
  }
  pcgc_ruleset_free(rs);
  return code;
}
