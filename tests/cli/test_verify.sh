#!/usr/bin/env bash
# test_verify.sh — `pcgc verify PLAN` and `pcgc compile --verify`: plans are
# derived again from their record, shrunk to small sizes and trained as one
# MPI process per device against the single-device reference:
#   - every small model on cpu-4; BERT-Large and GPT-3 2.7B on dgx-h100 (8
#     processes); DLRM on p100-4x4 (16); GPT-3 2.7B on p100-4x4 (dp 2 x tp 4
#     x pp 2, 1F1B, recomputation; 16 processes);
#   - refused: an edited plan (an operator's attribute, a removed reduce),
#     a plan without a derivation record, a plan whose joint-search trace no
#     longer applies or is missing;
#   - a plan the joint search rewrote (DLRM on dgx-h100): its trace replayed;
#   - DLRM's column-split tables on h100-4x8 (32 processes): runs of receives
#     unpacked at once;
#   - the region move's towers on disjoint GPU groups (tests/data/towers.pcg):
#     its "@branches" lines replayed, a line that no longer fits refused;
#   - a model that amplifies rounding at the check's sizes (Inception-v3 at
#     batch 2) is checked over one step, where its plan matches and a run
#     that skips its all-reduces does not;
#   - compile --verify writes the plan only when it verifies.
# ctest runs: bash test_verify.sh PCGC SOURCE_DIR. Exit 0 = pass, 77 = skipped.
set -uo pipefail
pcgc=${1:?usage: test_verify.sh PCGC SOURCE_DIR}
src=${2:?usage: test_verify.sh PCGC SOURCE_DIR}
source "$src/tests/common/cli.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
export ASAN_OPTIONS=detect_leaks=0   # Open MPI's own allocations at exit
reseal="/usr/bin/python3 $src/tests/cli/reseal_plan.py"

expect 0 "$pcgc" verify --help;          has "$tmp/out" "usage: pcgc verify PLAN"
expect 0 "$pcgc" help verify;            has "$tmp/out" "--tolerance"
expect 2 "$pcgc" verify;                 has "$tmp/err" "missing PLAN"
expect 2 "$pcgc" verify x.json --steps 0; has "$tmp/err" "--steps must be a positive integer"
expect 2 "$pcgc" verify x.json --bogus 1; has "$tmp/err" "unknown option '--bogus'"
expect 3 "$pcgc" verify "$tmp/missing.json"

# every small model on 4 CPU devices
for m in mlp cnn transformer-block embedding-bag; do
  expect 0 "$pcgc" compile "$src/models/$m.pcg" --machine cpu-4 --budget 0 -o "$tmp/$m.json"
  expect 0 "$pcgc" verify "$tmp/$m.json"
  has "$tmp/out" "derived again at its sizes: the same"
  has "$tmp/out" "verified: 3 steps"
  grep -E "^sizes" "$tmp/out" | sed "s/^/  $m: /"
done
# a constant fixed by --set
expect 0 "$pcgc" verify "$tmp/mlp.json" --set HIDDEN=8; has "$tmp/out" "HIDDEN=8 (was 512)"
expect 2 "$pcgc" verify "$tmp/mlp.json" --set NOPE=8;  has "$tmp/err" "no integer constant of that name"

# the plans the README compiles for real clusters, at small sizes
for spec in "bert-large dgx-h100" "gpt-3b dgx-h100" "dlrm p100-4x4" "gpt-3b p100-4x4 --batch 16"; do
  set -- $spec
  expect 0 "$pcgc" compile "$src/models/$1.pcg" --machine $2 --budget 0 ${3:-} ${4:-} -o "$tmp/$1-$2.json"
  expect 0 "$pcgc" verify "$tmp/$1-$2.json"
  has "$tmp/out" "verified: 3 steps"
  grep -E "^sizes|^verified" "$tmp/out" | sed "s/^/  $1 on $2: /"
done
has "$tmp/out" "LAYERS=32"                  # the layer count is kept
# normalised rows at least 8 wide and heads at least 4: at D=4 with heads of 1 and 32 layers
# f32 rounding alone differed from the reference by more than the tolerance
has "$tmp/out" "D=16 (was 2560) HEADS=4 (was 32)"
has "$tmp/out" "on 16 processes"

# an edited plan: an attribute of one operator (the checksum resealed)
drop=$(grep -o 'a = dropout([a-z_]*, rate=0.1)' "$tmp/transformer-block.json" | head -1) # (attn, or a rewrite's)
$reseal "$tmp/transformer-block.json" "$tmp/edited.json" "$drop" "${drop/rate=0.1/rate=0.2}"
expect 1 "$pcgc" verify "$tmp/edited.json"; has "$tmp/err" "differs at dropout 'a'"
# a removed reduce: the graph no longer type-checks where the partial sums were used
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice tp=4 --budget 0 -o "$tmp/tp.json"
red=$(grep -o '[A-Za-z0-9_.]* = reduce([A-Za-z0-9_.]*' "$tmp/tp.json" | head -1)
if [ -n "$red" ]; then
  name=${red%% =*}; arg=${red##*reduce(}
  $reseal "$tmp/tp.json" "$tmp/noreduce.json" "$red, degree=4)" "$name = identity($arg)"
  expect 1 "$pcgc" verify "$tmp/noreduce.json"    # refused where the partial sums are used, naming it
  has "$tmp/err" "reduce() the partial sums first"; grep -E "error" "$tmp/err" | head -1 | cut -c1-160 | sed "s/^/  removed reduce: /"
else
  bad "the tensor-parallel MLP plan has no reduce"
fi
# no derivation record: a plan of version 1
/usr/bin/python3 "$src/tests/runtime/make_plan.py" "$src/tests/data/parallel/mlp-dp4.pcg" cpu-4 "$tmp/v1.json"
expect 1 "$pcgc" verify "$tmp/v1.json"; has "$tmp/err" "does not record how it was derived"
# a plan the joint search rewrote: its trace replayed on the expert strategy,
# at the plan's sizes and at the small ones (DLRM on a DGX H100, whose
# rewrites shorten the program too, so compile keeps them)
expect 0 "$pcgc" compile "$src/models/dlrm.pcg" --machine dgx-h100 -o "$tmp/joint.json"
if grep -q '"rewrites":	0' "$tmp/joint.json"; then
  bad "the joint search left DLRM's expert strategy as it was: the replay is not exercised"
else
  has "$tmp/joint.json" '"trace":'
  expect 0 "$pcgc" verify "$tmp/joint.json"
  has "$tmp/out" "derived again at its sizes with the joint search's rewrites: the same"
  has "$tmp/out" "verified: 3 steps"
  grep -E "^sizes" "$tmp/out" | sed "s/^/  dlrm rewritten: /"
  # a trace that no longer applies: a first step at a node the graph lacks
  first=$(grep -o '"trace":	\["[^"]*' "$tmp/joint.json" | sed 's/.*\["//')
  rule=${first%% at *}; rule=${rule%% everywhere *}
  $reseal "$tmp/joint.json" "$tmp/badtrace.json" "\"trace\":	[\"" "\"trace\":	[\"$rule at no_such_node\", \""
  expect 1 "$pcgc" verify "$tmp/badtrace.json"
  has "$tmp/err" "cannot be derived again from its record: trace step 1 of"
  has "$tmp/err" "$rule"
  # a rule the library does not have
  $reseal "$tmp/joint.json" "$tmp/norule.json" "\"trace\":	[\"" "\"trace\":	[\"no_such_rule d=2 at x\", \""
  expect 1 "$pcgc" verify "$tmp/norule.json"; has "$tmp/err" "the rule library has no rule 'no_such_rule'"
  # rewrites without their trace (a plan of an older pcgc): refused
  $reseal "$tmp/joint.json" "$tmp/notrace.json" '"trace":' '"trace_of_another_pcgc":'
  expect 1 "$pcgc" verify "$tmp/notrace.json"; has "$tmp/err" "does not record its steps"
fi

# DLRM's tables split by columns over groups of 8 of 32 H100s: a gatherer receives a table's
# column pieces next to each other and unpacks them by one launch (pcgc_recv_unpack_run), on
# 32 processes against the reference
expect 0 "$pcgc" compile "$src/models/dlrm.pcg" --machine h100-4x8 -o "$tmp/dlrm32.json"
expect 0 "$pcgc" plan show "$tmp/dlrm32.json" --streams --device 0
has "$tmp/out" " at once)"
expect 0 "$pcgc" verify "$tmp/dlrm32.json" --steps 2
has "$tmp/out" "verified: 2 steps"

# the region move: inception-style towers narrowed onto disjoint groups of a DGX H100's GPUs
# (data parallel over all 8, no rule expanded); the plan's "@branches" lines replayed, then
# trained on 8 processes against the reference; a line that no longer fits is refused
expect 0 "$pcgc" compile "$src/tests/data/towers.pcg" --machine dgx-h100 --choice dp=8 --budget 1 -o "$tmp/towers.json"
has "$tmp/out" "@branches (branches of 2 regions on disjoint devices)"
has "$tmp/towers.json" '"@branches 4 2 1 1 at m1.y", "@branches 4 2 1 1 at m2.y"'
expect 0 "$pcgc" verify "$tmp/towers.json"
has "$tmp/out" "derived again at its sizes with the joint search's rewrites: the same"
has "$tmp/out" "verified: 3 steps"
$reseal "$tmp/towers.json" "$tmp/towers-bad.json" '"@branches 4 2 1 1 at m1.y"' '"@branches 4 2 1 at m1.y"'
expect 1 "$pcgc" verify "$tmp/towers-bad.json"
has "$tmp/err" "'m1.y' has 4 branches, the step sizes 3"

# the joint search fuses every batch norm with its relu (fuse_batchnorm_affine_relu, everywhere):
# the fused op's statistics, summed over the data-parallel pieces, and its masked backward, trained
# on the machine's 8 processes against the reference
expect 0 "$pcgc" compile "$src/models/cnn.pcg" --machine dgx-h100 -o "$tmp/cnn-fused.json"
has "$tmp/out" "the last by fuse_batchnorm_affine_relu (everywhere)"
has "$tmp/cnn-fused.json" "momentum=0.1, act=relu)"
expect 0 "$pcgc" verify "$tmp/cnn-fused.json"
has "$tmp/out" "verified: 3 steps of $tmp/cnn-fused.json on 8 processes"

# a runtime that trains wrongly (test hook: all-reduces leave the gradients alone) is caught, naming
# the first weight whose gradient differs and the operator reading it
PCGC_TEST_FAULT=skip-allreduce "$pcgc" verify "$tmp/transformer-block.json" >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && ok || bad "verify passed a run whose all-reduces were skipped"
has "$tmp/out" "first difference in the model's order:"
has "$tmp/out" "NOT verified"
grep -E "first difference" "$tmp/out" | sed "s/^/  skipped all-reduces: /"

# a model that amplifies rounding at the check's sizes (Inception-v3 at batch 2: 94 batch norms, a
# last bit of every weight moves the reference by whole percents in one step): verify says so and
# checks one step from the same weights, where the plan matches; a runtime that trains wrongly is
# still caught in that step
expect 0 "$pcgc" compile "$src/models/inception-v3.pcg" --machine dgx-h100 --batch 16 --choice dp=2 --budget 0 -o "$tmp/inc.json"
expect 0 "$pcgc" verify "$tmp/inc.json" --set R=75
has "$tmp/out" "at these sizes the model amplifies rounding: the reference trained from weights one ulp off differs by"
has "$tmp/out" "checking 1 step, from the same weights"
has "$tmp/out" "verified: 1 step of"
PCGC_TEST_FAULT=skip-allreduce "$pcgc" verify "$tmp/inc.json" --set R=75 >"$tmp/out" 2>"$tmp/err"
[ $? -ne 0 ] && ok || bad "verify passed an Inception run whose all-reduces were skipped"
has "$tmp/out" "NOT verified"

# compile --verify: written only when verified
expect 0 "$pcgc" compile "$src/models/cnn.pcg" --machine cpu-2 --budget 0 --verify -o "$tmp/cv.json"
has "$tmp/out" "verified: 3 steps"; has "$tmp/out" "wrote $tmp/cv.json"
[ -f "$tmp/cv.json" ] && ok || bad "compile --verify did not write the plan"
ls "$tmp"/cv.json.verify.tmp >/dev/null 2>&1 && bad "compile --verify left its temporary plan" || ok
finish test_verify
