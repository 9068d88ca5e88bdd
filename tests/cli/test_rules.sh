#!/usr/bin/env bash
# test_rules.sh — `pcgc rules check|list` (docs/rules.md, docs/cli.md): the
# shipped library loads and is sound, every deliberately wrong rule in
# tests/data/unsound-rules is reported unsound with an instance and a seed,
# a malformed file is an error with file:line:col, and list counts instances.
# ctest runs: bash test_rules.sh PCGC SOURCE_DIR. Exit 0 = pass.
set -uo pipefail
pcgc=${1:?usage: test_rules.sh PCGC SOURCE_DIR}
src=${2:?usage: test_rules.sh PCGC SOURCE_DIR}
source "$src/tests/common/cli.sh"

expect 0 "$pcgc" rules --help;        has "$tmp/out" "usage: pcgc rules check"
expect 0 "$pcgc" help rules;          has "$tmp/out" "usage: pcgc rules check"
expect 2 "$pcgc" rules;               has "$tmp/err" "missing a subcommand"
expect 2 "$pcgc" rules frob;          has "$tmp/err" "unknown subcommand 'frob'"
expect 2 "$pcgc" rules check --seeds 0
expect 3 "$pcgc" rules check "$tmp/none.rules"; has "$tmp/err" "none.rules"

# every unsound rule is caught, with the instance and the seed
for f in "$src"/tests/data/unsound-rules/*.rules; do
  expect 1 "$pcgc" rules check "$f"
  has "$tmp/out" "UNSOUND"; has "$tmp/out" "instance"; has "$tmp/out" "1 unsound"
done

# a sound rule and a wrong one side by side: exit 1, one of each
cat >"$tmp/two.rules" <<'RULES'
rule fuse_relu_ok {
  match { input x: [B, K], w: [K, N]; y = linear(x, w, act=none); r = relu(y); yield r; }
  rewrite { f = linear(x, w, y.*, act=relu); yield f; }
}
rule fuse_sigmoid_as_relu {
  match { input x: [B, K], w: [K, N]; y = linear(x, w, act=none); r = sigmoid(y); yield r; }
  rewrite { f = linear(x, w, y.*, act=relu); yield f; }
}
RULES
expect 1 "$pcgc" rules check "$tmp/two.rules"
has "$tmp/out" "ok       fuse_relu_ok"; has "$tmp/out" "UNSOUND  fuse_sigmoid_as_relu"; has "$tmp/out" "2 rules: 1 sound, 1 unsound"

# a partition whose combine uses the wrong dim
cat >"$tmp/dim.rules" <<'RULES'
rule partition_relu_wrong_dim(d: degree) {
  match { input x: [A, C]; y = relu(x); yield y; }
  where { A % d == 0; C % d == 0; }
  rewrite { p = partition(x, dim=0, degree=d); q = relu(p); c = combine(q, dim=1, degree=d); yield c; }
}
RULES
expect 1 "$pcgc" rules check "$tmp/dim.rules"; has "$tmp/out" "UNSOUND"

# a malformed file: file:line:col
printf 'rule broken {\n  match { input x; y = relu(x) yield y; }\n' >"$tmp/bad.rules"
expect 1 "$pcgc" rules check "$tmp/bad.rules"; has "$tmp/err" "bad.rules:2:"

# list: instance counts for a machine and a model
expect 0 "$pcgc" rules list "$tmp/dim.rules" --machine dgx-h100
has "$tmp/out" "partition_relu_wrong_dim"; has "$tmp/out" "1 rules, 3 instances for dgx-h100"
expect 3 "$pcgc" rules list --machine dgx-h101

# (the shipped library's soundness is its own ctest: rules_check_library)

finish test_rules
