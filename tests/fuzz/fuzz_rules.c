/*
 * fuzz_rules.c — libFuzzer target for the rule-file reader: parses the input
 * bytes as a rules file (pcgc_ruleset_parse) into a fresh rule set and, when
 * that succeeds, walks every rule through the public accessors, then frees
 * the set. Any crash, sanitizer report or leak is a bug; errors are expected.
 *
 * Build: CC=clang-14 cmake -S . -B build-fuzz -DPCGC_FUZZ=ON -DWITH_CUDA=OFF && cmake --build build-fuzz
 * Run:   build-fuzz/fuzz_rules -dict=tests/fuzz/rules.dict NEW_CORPUS tests/fuzz/corpus/rules
 */
#include <stddef.h>
#include <stdint.h>

#include "substitutions.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pcgc_error err;
  pcgc_ruleset *rs = pcgc_ruleset_new();
  if (!rs) return 0;
  if (pcgc_ruleset_parse(rs, (const char *)data, size, "fuzz.rules", &err) == PCGC_OK) {
    volatile size_t sum = 0;
    for (int i = 0; i < pcgc_ruleset_size(rs); i++) {
      const pcgc_rule *r = pcgc_ruleset_rule(rs, i);
      sum += (size_t)pcgc_rule_loc(r).line + (size_t)pcgc_rule_name(r)[0];
      for (int p = 0; p < pcgc_rule_num_params(r); p++)
        sum += (size_t)pcgc_rule_param_name(r, p)[0] + pcgc_rule_param_is_degree(r, p);
      if (pcgc_ruleset_find(rs, pcgc_rule_name(r)) != r) __builtin_trap();
    }
    (void)sum;
  }
  pcgc_ruleset_free(rs);
  return 0;
}
