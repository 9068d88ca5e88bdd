#!/usr/bin/env bash
# test_run.sh — `pcgc run PLAN` (the distributed CPU runtime over MPI) and
# `pcgc plan show`: every plan below is trained for 3 steps as one process per
# device and must match (--check) the single-process reference interpreter,
# and its losses must equal `pcgc train` of the sequential model:
#   - plans `pcgc compile` finds for the MLP, the CNN, the transformer block and
#     the embedding-bag model on cpu-2, cpu-4 and cpu-8;
#   - hand-written strategies (tests/data/parallel/ wrapped by
#     tests/runtime/make_plan.py): data, tensor (Megatron), head split,
#     spatial, channel, embedding rows and columns, a reduction split,
#     pipelines in GPipe and 1F1B order, data x pipeline;
# plus help, usage errors and a plan for a machine that cannot be found.
# ctest runs: bash test_run.sh PCGC SOURCE_DIR. Exit 0 = pass, 77 = skipped.
set -uo pipefail
pcgc=${1:?usage: test_run.sh PCGC SOURCE_DIR}
src=${2:?usage: test_run.sh PCGC SOURCE_DIR}
source "$src/tests/common/cli.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }
export ASAN_OPTIONS=detect_leaks=0   # Open MPI's own allocations at exit
par="$src/tests/data/parallel"
mk="$src/tests/runtime/make_plan.py"

# --- help and usage
expect 0 "$pcgc" run --help;            has "$tmp/out" "usage: pcgc run PLAN"
expect 0 "$pcgc" help run;              has "$tmp/out" "--check"
expect 0 "$pcgc" plan --help;           has "$tmp/out" "usage: pcgc plan show PLAN"
expect 2 "$pcgc" run;                   has "$tmp/err" "missing PLAN"
expect 2 "$pcgc" run x.json --steps -1; has "$tmp/err" "--steps must be a non-negative integer"
expect 2 "$pcgc" run x.json --bogus;    has "$tmp/err" "unknown option '--bogus'"
expect 3 "$pcgc" run "$tmp/missing.json"
expect 2 "$pcgc" plan list x.json;      has "$tmp/err" "unknown subcommand 'list'"

# a plan must name a machine pcgc can load
/usr/bin/python3 "$mk" "$par/mlp-dp4.pcg" no-such-machine "$tmp/nomachine.json"
expect 3 "$pcgc" run "$tmp/nomachine.json"; has "$tmp/err" "was written for machine 'no-such-machine'"

# without MPI: the TCP control plane (PCGC_RENDEZVOUS, runtime/ctl.h; tests/runtime/test_ctl.c
# meets real processes). One process needs no peer; a CPU plan of two devices is refused (its
# messages go through MPI); malformed variables and a world of the wrong size name their fix
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-local --budget 0 --optimizer sgd -o "$tmp/tcp1.json"
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-2 --choice dp=2 --budget 0 --optimizer sgd -o "$tmp/tcp2.json"
expect 0 env PCGC_RENDEZVOUS=127.0.0.1:29611 PCGC_RANK=0 PCGC_WORLD_SIZE=1 "$pcgc" run "$tmp/tcp1.json" --check
has "$tmp/out" "on 1 process"; has "$tmp/out" ": match"
expect 1 env PCGC_RENDEZVOUS=127.0.0.1:29611 PCGC_RANK=1 PCGC_WORLD_SIZE=2 "$pcgc" run "$tmp/tcp2.json"
has "$tmp/err" "rank 1: error: $tmp/tcp2.json cannot run without MPI (PCGC_RENDEZVOUS is set)"
has "$tmp/err" "the cpu backend has no communicators of its own"; has "$tmp/err" "start it under mpirun -np 2"
expect 1 env PCGC_RENDEZVOUS=127.0.0.1:29611 PCGC_RANK=0 PCGC_WORLD_SIZE=1 "$pcgc" run "$tmp/tcp2.json"
has "$tmp/err" "start one process per device, each with PCGC_WORLD_SIZE=2"
expect 2 env PCGC_RENDEZVOUS=localhost "$pcgc" run "$tmp/tcp1.json"; has "$tmp/err" "expected HOST:PORT"
expect 2 env -u RANK PCGC_RENDEZVOUS=localhost:29611 PCGC_WORLD_SIZE=1 "$pcgc" run "$tmp/tcp1.json"
has "$tmp/err" "PCGC_RENDEZVOUS is set, but PCGC_RANK (or RANK) is not"

# train losses of a sequential model, 3 steps, no dropout
train_losses() { "$pcgc" train "$1" --steps 3 --no-dropout | awk '/^step/ {print $4}' | tr '\n' ' '; }

# run PLAN --check; its losses must equal those of `pcgc train SEQ`
check_plan() {
  local plan=$1 seq=$2 what=$3
  expect 0 "$pcgc" run "$plan" --steps 3 --check --no-dropout
  has "$tmp/out" ": match"
  local got want
  got=$(awk '/^step/ {print $4}' "$tmp/out" | tr '\n' ' ')
  want=$(train_losses "$seq")
  if [ -n "$want" ] && [ "$got" = "$want" ]; then ok; else bad "$what: run losses [$got] != train losses [$want]"; fi
}

# --- hand-written strategies
h() { /usr/bin/python3 "$mk" "$par/$1" "$2" "$tmp/$3.json" "${@:4}"; }
h mlp-dp4.pcg cpu-4 dp4;             check_plan "$tmp/dp4.json" "$par/mlp.pcg" "data parallel x4"
h mlp-tp2.pcg cpu-2 tp2;             check_plan "$tmp/tp2.json" "$par/mlp.pcg" "tensor parallel x2"
h mlp-reduction2.pcg cpu-2 red2 h2=1,0;  check_plan "$tmp/red2.json" "$par/mlp.pcg" "reduction split + reduce"
h transformer-tp2.pcg cpu-2 heads2;  check_plan "$tmp/heads2.json" "$par/transformer.pcg" "attention heads x2"
h cnn-spatial2.pcg cpu-2 spatial2;   check_plan "$tmp/spatial2.json" "$par/cnn.pcg" "spatial x2"
h cnn-channel2.pcg cpu-2 channel2;   check_plan "$tmp/channel2.json" "$par/cnn.pcg" "channels x2"
h cnn-dp4.pcg cpu-4 cnndp4;          check_plan "$tmp/cnndp4.json" "$par/cnn.pcg" "CNN data parallel x4 (synchronised batch norm)"
h embbag-rows2.pcg cpu-2 rows2;      check_plan "$tmp/rows2.json" "$par/embbag.pcg" "embedding rows x2"
h embbag-cols2.pcg cpu-2 cols2;      check_plan "$tmp/cols2.json" "$par/embbag.pcg" "embedding columns x2"
stages="h1=0,0 h2=1,0 logits=2,0 loss=2,0"   # 3 stages, 4 micro-batches
h mlp-pipe4.pcg cpu-4 gpipe $stages;                 check_plan "$tmp/gpipe.json" "$par/mlp.pcg" "pipeline GPipe"
h mlp-pipe4.pcg cpu-4 onefoneb $stages --schedule 1f1b; check_plan "$tmp/onefoneb.json" "$par/mlp.pcg" "pipeline 1F1B"
h mlp-dp2-pipe2.pcg cpu-4 dppipe h1=0,2 h2=1,2 logits=3,0 loss=3,0
check_plan "$tmp/dppipe.json" "$par/mlp.pcg" "data x pipeline"

# 1F1B really interleaves: the first stage runs micro-batch 0's backward before micro-batch 3's forward
expect 0 "$pcgc" plan show "$tmp/onefoneb.json" --device 0 --streams
has "$tmp/out" "4 micro-batches (1f1b), 3 stages"
b0=$(grep -n "backward  *h1 .* mb0" "$tmp/out" | head -1 | cut -d: -f1)
f3=$(grep -n "forward  *h1 .* mb3" "$tmp/out" | head -1 | cut -d: -f1)
if [ -n "$b0" ] && [ -n "$f3" ] && [ "$b0" -lt "$f3" ]; then ok; else bad "1F1B: h1's backward of mb0 (line $b0) not before its forward of mb3 (line $f3)"; fi
expect 0 "$pcgc" plan show "$tmp/gpipe.json" --device 0 --streams
b0=$(grep -n "backward  *h1 .* mb0" "$tmp/out" | head -1 | cut -d: -f1)
f3=$(grep -n "forward  *h1 .* mb3" "$tmp/out" | head -1 | cut -d: -f1)
if [ -n "$b0" ] && [ -n "$f3" ] && [ "$f3" -lt "$b0" ]; then ok; else bad "GPipe: every forward before any backward"; fi

# --- activation recomputation: units made again before backward; less memory, the same training
tb="$src/models/transformer-block.pcg"
expect 0 "$pcgc" compile "$tb" --machine cpu-2 --choice dp=2 --budget 0 --optimizer sgd -o "$tmp/keep.json"
expect 0 "$pcgc" compile "$tb" --machine cpu-2 --choice dp=2,recompute --budget 0 --optimizer sgd -o "$tmp/rc.json"
has "$tmp/out" "activations recomputed"
arena() { "$pcgc" plan show "$1" --device 0 | awk '$1 == "0" {print $3}'; }
a_keep=$(arena "$tmp/keep.json"); a_rc=$(arena "$tmp/rc.json")
awk -v a="$a_rc" -v b="$a_keep" 'BEGIN { exit !(a > 0 && a < b) }' && ok || bad "recomputation: arena $a_rc MiB not below $a_keep MiB"
expect 0 "$pcgc" plan show "$tmp/rc.json" --device 0 --streams
has "$tmp/out" "kernel pieces run again before backward"; has "$tmp/out" " recompute "
check_plan "$tmp/rc.json" "$tb" "transformer block, recomputed"
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice pp=2,micro=4,schedule=1f1b,recompute --budget 0 \
  --optimizer sgd -o "$tmp/rc1f1b.json"
check_plan "$tmp/rc1f1b.json" "$src/models/mlp.pcg" "pipeline 1F1B, recomputed"
expect 0 "$pcgc" compile "$src/models/cnn.pcg" --machine cpu-2 --choice dp=2,recompute --budget 0 --optimizer sgd \
  -o "$tmp/rccnn.json"
check_plan "$tmp/rccnn.json" "$src/models/cnn.pcg" "CNN data parallel, recomputed (batch norm kept)"

# --- bf16 storage (mixed precision): activations and their gradients in bf16, weights,
# their gradients and optimizer state in f32; kernels compute in f32 on widened copies;
# bf16 messages, and bf16 partial sums of tensor parallelism summed by MPI (bf16_sum)
bfc="tp=2,pp=2,micro=4,schedule=1f1b"
expect 0 "$pcgc" compile "$tb" --machine cpu-4 --choice $bfc --budget 0 --optimizer sgd --precision bf16 -o "$tmp/bf16.json"
has "$tmp/out" "bf16 mixed precision: activations and their gradients stored in bf16"
expect 0 "$pcgc" compile "$tb" --machine cpu-4 --choice $bfc --budget 0 --optimizer sgd -o "$tmp/f32.json"
expect 0 "$pcgc" plan show "$tmp/bf16.json" --device 0
has "$tmp/out" "bf16 storage: activations and their gradients in bf16"
a16=$(arena "$tmp/bf16.json"); a32=$(arena "$tmp/f32.json")
awk -v a="$a16" -v b="$a32" 'BEGIN { exit !(a > 0 && a < b) }' && ok || bad "bf16 storage: arena $a16 MiB not below $a32 MiB"
expect 0 "$pcgc" run "$tmp/bf16.json" --steps 3 --check --save-weights "$tmp/w16"
has "$tmp/out" "activations stored in bf16, arithmetic in f32"; has "$tmp/out" "tolerance 1e-01: match"
grep "^step" "$tmp/out" | awk '{print $4}' >"$tmp/l16"
expect 0 "$pcgc" run "$tmp/f32.json" --steps 3 --save-weights "$tmp/w32"
grep "^step" "$tmp/out" | awk '{print $4}' >"$tmp/l32"
# the storage is really bf16: the losses move off the f32 run's (by less than the tolerance above)
paste "$tmp/l16" "$tmp/l32" | awk 'NF == 2 && $1 != $2 { d = 1 } END { exit !d }' && ok ||
  bad "bf16 storage trains exactly as f32: $(tr '\n' ' ' <"$tmp/l16")"
# and every weight's update is the f32 run's to within 10% (measured: 0.05-2.3%), which the
# check's tolerance alone cannot say: a gradient dropped or doubled in bf16 would be 100% off.
# Weights whose update is below 1e-3 of the largest (a key bias: zero but for rounding) are left out.
expect 0 "$pcgc" run "$tmp/f32.json" --steps 1 --lr 1e-30 --save-weights "$tmp/w0"
if /usr/bin/python3 - "$tmp/f32.json" "$tmp/w0" "$tmp/w32" "$tmp/w16" >"$tmp/upd" 2>&1 <<'PY'
import json, re, struct, sys
plan, *files = sys.argv[1:]
shapes = re.findall(r"^weight (\S+): f32\[([0-9, ]*)\]", json.load(open(plan))["model"], re.M)
w0, w32, w16 = (struct.unpack("<%df" % (len(b) // 4), b) for b in (open(f, "rb").read() for f in files))
norm = lambda v: sum(x * x for x in v) ** 0.5
off, rows = 0, []
for name, dims in shapes:
    n = 1
    for d in dims.split(","):
        n *= int(d)
    rows.append((name, norm([w32[off + i] - w0[off + i] for i in range(n)]),
                 norm([w16[off + i] - w32[off + i] for i in range(n)])))
    off += n
assert off == len(w0) == len(w32) == len(w16), "weights of the plan do not match the files"
top = max(u for _, u, _ in rows)
worst = max((d / u, name) for name, u, d in rows if u >= 1e-3 * top)
print("largest update difference %.4f (%s)" % worst)
sys.exit(0 if worst[0] < 0.1 else 1)
PY
then ok; else bad "bf16 storage's updates differ from f32's: $(cat "$tmp/upd")"; fi
# a f32 plan run in bf16 is lowered again for it
expect 0 "$pcgc" run "$tmp/f32.json" --steps 1 --precision bf16
has "$tmp/out" "activations stored in bf16"
# tf32 is GEMM arithmetic, which CPUs do not have: refused, with the way out
expect 1 "$pcgc" compile "$tb" --machine cpu-4 --precision tf32 --budget 0
has "$tmp/err" "needs a GPU machine"; has "$tmp/err" "--precision bf16 works there"
expect 1 "$pcgc" run "$tmp/f32.json" --precision tf32
has "$tmp/err" "the cpu backend computes in f32 only"

# --- plans pcgc compile finds, on 2, 4 and 8 processes
for m in mlp cnn transformer-block embedding-bag; do
  for n in 2 4 8; do
    expect 0 "$pcgc" compile "$src/models/$m.pcg" --machine cpu-$n -o "$tmp/$m$n.json"
    expect 0 "$pcgc" run "$tmp/$m$n.json" --steps 3 --check --optimizer sgd
    has "$tmp/out" ": match"
  done
done
# the joint search's hybrid of a recommender: from data parallelism on 4 processes, the region
# move puts each embedding table with its bag on a process of its own, whole batch (faster by the
# estimate than the tables split by columns, embedding_batch_to_columns, which DLRM's tests run),
# trained against the reference
expect 0 "$pcgc" compile "$src/models/embedding-bag.pcg" --machine cpu-4 --choice dp=4 -o "$tmp/ebh.json"
has "$tmp/ebh.json" '"@branches 1 1 1 1 at cat"'
expect 0 "$pcgc" run "$tmp/ebh.json" --steps 3 --check
has "$tmp/out" ": match"
# the region move: inception-style towers on disjoint groups of 4, 2, 1 and 1 of a DGX H100's GPUs
# (strided views, combines into each group and partitions out of it), trained on 8 CPU
# processes against the reference; a device's own samples are not copied into its tower's
# input nor out of its output: the buffers share bytes (codegen's alias_copies)
expect 0 "$pcgc" compile "$src/tests/data/towers.pcg" --machine dgx-h100 --choice dp=8 -o "$tmp/towers.json"
has "$tmp/towers.json" '"@branches 4 2 1 1 at m1.y"'
expect 0 "$pcgc" plan show "$tmp/towers.json" --streams --device 0
has "$tmp/out" "m1.y.out0                   0   0   9.0 KiB"
if grep -q "value       m1.y.out0 .* in b[0-9]* at +0" "$tmp/out"; then ok; else bad "m1.y.out0 on device 0 does not lie in the tower's output"; fi
expect 0 "$pcgc" run "$tmp/towers.json" --backend cpu --steps 3 --check
has "$tmp/out" ": match"
# a scalar weight under data parallelism: its gradient is all-reduced once (it was twice, which
# SGD trains wrongly and Adam hides)
printf 'model scal\ninput x: f32[8, 16]\ninput t: f32[8, 16]\nweight s: f32[] = uniform(0.1)\ny = mul(x, s)\nloss = mse(y, t)\n' \
  >"$tmp/scal.pcg"
expect 0 "$pcgc" compile "$tmp/scal.pcg" --machine cpu-2 --choice dp=2 --budget 0 --optimizer sgd -o "$tmp/scal.json"
expect 0 "$pcgc" run "$tmp/scal.json" --steps 3 --check --optimizer sgd; has "$tmp/out" ": match"
# ZeRO: each data-parallel copy sums a slab of every weight's gradient (a reduce-scatter in place
# of the all-reduce: rows j L/4 to (j+1) L/4, logits' bias of 10 in 2, 3, 2, 3, through
# MPI_Ireduce_scatter; the others' equal slabs through MPI_Ireduce_scatter_block), updates that
# slab and keeps Adam's state for it alone, then the copies all-gather the slabs. With one
# micro-batch (ZeRO-2) the reduce-scatter sums each slab into a buffer of the slab alone, and the
# full gradient lives from its backward until the WAIT, right after the next weight's
# reduce-scatter starts. It trains as the reference, and --check-report's gradients (each slab
# from the copy that summed it) match
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice dp=4 --budget 0 -o "$tmp/z0.json"
m0=$(sed -n 's/^memory per device (max) *\([0-9.]*\) MiB.*/\1/p' "$tmp/out")
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice dp=4,zero --budget 0 -o "$tmp/zero1.json"
has "$tmp/out" "optimizer state sharded (ZeRO-1)"
m1=$(sed -n 's/^memory per device (max) *\([0-9.]*\) MiB.*/\1/p' "$tmp/out")
# Adam's state of the 535,818 weights is 4.1 MiB per copy without, about a quarter with
awk -v a="$m0" -v b="$m1" 'BEGIN { exit !(a - b > 2.5 && a - b < 3.5) }' && ok || bad "ZeRO-1 memory $m1 MiB against $m0 MiB"
expect 0 "$pcgc" plan show "$tmp/zero1.json" --device 1 --streams
[ "$(grep -c ' allgather ' "$tmp/out")" = 6 ] && ok || bad "expected 6 all-gathers on device 1: $(grep -c ' allgather ' "$tmp/out")"
[ "$(grep -c ' reducescatter-start ' "$tmp/out")" = 6 ] && ok \
  || bad "expected 6 reduce-scatters on device 1: $(grep -c ' reducescatter-start ' "$tmp/out")"
[ "$(grep -c ' allreduce-start ' "$tmp/out")" = 0 ] && ok || bad "gradients all-reduced under ZeRO"
[ "$(grep -c 'source-grad .* always \[' "$tmp/out")" = 6 ] && ok || bad "ZeRO-1: expected 6 persistent full gradients"
expect 0 "$pcgc" run "$tmp/zero1.json" --steps 3 --check-report; has "$tmp/out" ": match"
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice dp=4,zero=2 --budget 0 -o "$tmp/zero.json"
has "$tmp/out" "optimizer state and gradients sharded (ZeRO-2)"
m2=$(sed -n 's/^memory per device (max) *\([0-9.]*\) MiB.*/\1/p' "$tmp/out")
grep -q '"zero":[[:space:]]*2' "$tmp/zero.json" && ok || bad "the plan's choice does not record ZeRO stage 2"
expect 0 "$pcgc" simulate "$tmp/zero.json" --machine cpu-4; has "$tmp/out" "(ZeRO-2)"
expect 2 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice dp=4,zero=4 --budget 0
has "$tmp/err" "the ZeRO stage is 0, 1, 2 or 3"
# the gradients' 2 MiB become slabs of a quarter, but in this 3-layer model every full gradient is
# in flight at once at the end of backward, so here ZeRO-2 needs the slabs' half MiB more
awk -v a="$m1" -v b="$m2" 'BEGIN { exit !(b - a > 0.3 && b - a < 0.7) }' && ok || bad "ZeRO-2 memory $m2 MiB against ZeRO-1's $m1 MiB"
expect 0 "$pcgc" plan show "$tmp/zero.json" --device 1 --streams
[ "$(grep -c ' reducescatter-start ' "$tmp/out")" = 6 ] && ok || bad "ZeRO-2: expected 6 reduce-scatters on device 1"
# the slabs' gradient buffers persist (a quarter of h1.weight: rows 196..392 of 784 on device 1),
# the full ones do not; the first WAIT comes before the last reduce-scatter starts
[ "$(grep -c 'source-grad .* always \[' "$tmp/out")" = 6 ] && ok || bad "expected 6 persistent gradient slabs"
grep -q 'source-grad h1.weight .* always \[196:392,0:512\]' "$tmp/out" && ok || bad "h1.weight's slab on device 1"
w1=$(grep -n ' wait ' "$tmp/out" | head -1 | cut -d: -f1)
r6=$(grep -n ' reducescatter-start ' "$tmp/out" | tail -1 | cut -d: -f1)
[ "${w1:-0}" -gt 0 ] && [ "$w1" -lt "${r6:-0}" ] && ok || bad "the WAITs were not moved into backward ($w1, $r6)"
expect 0 "$pcgc" run "$tmp/zero.json" --steps 3 --check-report; has "$tmp/out" ": match"
has "$tmp/out" "the last step's gradients of 6 weights differ by at most"
expect 0 "$pcgc" compile "$tb" --machine cpu-4 --choice dp=2,tp=2,zero=2 --budget 0 -o "$tmp/zerotp.json"
expect 0 "$pcgc" run "$tmp/zerotp.json" --steps 3 --check; has "$tmp/out" ": match"
# ZeRO-3: each device keeps a quarter of every weight (its slab, persistent) and all-gathers the whole
# weight into a transient buffer before its first forward read and again before its backward; no
# all-gather after the update; every gradient reduce-scattered into its slab
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice dp=4,zero=3 --budget 0 -o "$tmp/zero3.json"
has "$tmp/out" "weights, gradients and optimizer state sharded (ZeRO-3)"
m3=$(sed -n 's/^memory per device (max) *\([0-9.]*\) MiB.*/\1/p' "$tmp/out")
grep -q '"zero":[[:space:]]*3' "$tmp/zero3.json" && ok || bad "the plan's choice does not record ZeRO stage 3"
expect 0 "$pcgc" plan show "$tmp/zero3.json" --device 1 --streams
[ "$(grep -c ' allgather ' "$tmp/out")" = 12 ] && ok || bad "ZeRO-3: expected 12 all-gathers on device 1: $(grep -c ' allgather ' "$tmp/out")"
grep -q 'source  *h1.weight .* always \[196:392,0:512\]' "$tmp/out" && ok || bad "ZeRO-3: h1.weight's slab on device 1"
[ "$(grep -c 'source  *[a-z0-9.]*\.\(weight\|bias\) .* always' "$tmp/out")" = 6 ] && ok || bad "ZeRO-3: expected 6 persistent weight slabs"
[ "$(grep -c 'gathered  *h1.weight .* [0-9]*\.\.[0-9]* \[0:784,0:512\]' "$tmp/out")" = 2 ] && ok \
  || bad "ZeRO-3: expected h1.weight gathered whole twice, for forward and backward, transient"
last=$(grep -n ' update ' "$tmp/out" | tail -1 | cut -d: -f1); ag=$(grep -n ' allgather ' "$tmp/out" | tail -1 | cut -d: -f1)
[ "${ag:-0}" -lt "${last:-0}" ] && ok || bad "ZeRO-3: an all-gather after the last update"
# persistent: three quarters of the 2 MiB of weights less than ZeRO-2 (the peak is hardly lower in
# this model: h1 holds three quarters of its weights, gathered whole while its gradient is summed;
# 6.1 MiB against ZeRO-2's 6.18, where a zeroing moved up to share a launch holds a gradient a few
# kernels longer)
expect 0 "$pcgc" plan show "$tmp/zero.json"; p2=$(awk '$1 == 1 {print $5}' "$tmp/out")
expect 0 "$pcgc" plan show "$tmp/zero3.json"; p3=$(awk '$1 == 1 {print $5}' "$tmp/out")
awk -v a="$p2" -v b="$p3" 'BEGIN { exit !(a - b > 1.4 && a - b < 1.6) }' && ok \
  || bad "ZeRO-3 keeps $p3 MiB against ZeRO-2's $p2 MiB"
awk -v a="$m3" -v b="$m2" 'BEGIN { exit !(a <= b && a > 0.95 * b) }' && ok \
  || bad "the mlp's peak under ZeRO-3 ($m3 MiB) is not just under ZeRO-2's ($m2 MiB): update the comment"
expect 0 "$pcgc" run "$tmp/zero3.json" --steps 3 --check-report; has "$tmp/out" ": match"
has "$tmp/out" "the last step's gradients of 6 weights differ by at most"
expect 0 "$pcgc" simulate "$tmp/zero3.json" --machine cpu-4; has "$tmp/out" "(ZeRO-3)"
# with tensor parallelism (attention's weights gathered per tensor-parallel shard), and with
# two micro-batches over a pipeline, where it shards the optimizer state alone (ZeRO-1: a weight
# gathered once would live through every micro-batch)
# the transformer block at dp 4: a lower peak (52 MiB with ZeRO-2)
expect 0 "$pcgc" compile "$tb" --machine cpu-4 --choice dp=4,zero=2 --budget 0
t2=$(sed -n 's/^memory per device (max) *\([0-9.]*\) MiB.*/\1/p' "$tmp/out")
expect 0 "$pcgc" compile "$tb" --machine cpu-4 --choice dp=4,zero=3 --budget 0
t3=$(sed -n 's/^memory per device (max) *\([0-9.]*\) MiB.*/\1/p' "$tmp/out")
awk -v a="$t2" -v b="$t3" 'BEGIN { exit !(a - b > 5) }' && ok || bad "transformer block: ZeRO-3 $t3 MiB, ZeRO-2 $t2 MiB"
expect 0 "$pcgc" compile "$tb" --machine cpu-4 --choice dp=2,tp=2,zero=3 --budget 0 -o "$tmp/zero3tp.json"
expect 0 "$pcgc" run "$tmp/zero3tp.json" --steps 3 --check; has "$tmp/out" ": match"
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice dp=2,pp=2,micro=2,zero=3 --budget 0 \
  -o "$tmp/zero3pp.json"
has "$tmp/out" "optimizer state sharded (ZeRO-1)"
expect 0 "$pcgc" plan show "$tmp/zero3pp.json" --device 0 --streams
grep -q ' gathered ' "$tmp/out" && bad "ZeRO-3 with two micro-batches gathered weights" || ok
expect 0 "$pcgc" run "$tmp/zero3pp.json" --steps 3 --check; has "$tmp/out" ": match"
# compile lowers each plan with both orders of the global schedule and keeps the faster program:
# CANDLE-Uno's pipeline of 4 runs its stages sooner by the longest remaining path; the plan
# records it, and run, simulate and plan show lower it the same way (no other digest)
expect 0 "$pcgc" compile "$src/models/candle-uno.pcg" --machine cpu-4 --batch 16 --set W=128 --set TOWER_DEPTH=2 \
  --set DEPTH=2 --choice pp=4,micro=4 --budget 0 -o "$tmp/cpath.json"
grep -q '"order":[[:space:]]*"critical-path"' "$tmp/cpath.json" && ok || bad "CANDLE-Uno's pipeline kept the topological order"
expect 0 "$pcgc" simulate "$tmp/cpath.json" --machine cpu-4
pc=$(sed -n 's/^  predicted *\([0-9.e-]*\) s by pcgc compile, \([0-9.e-]*\) s now.*/\1 \2/p' "$tmp/out")
[ -n "$pc" ] && [ "${pc% *}" = "${pc#* }" ] && ok || bad "simulate lowered the plan otherwise: $pc"
expect 0 "$pcgc" run "$tmp/cpath.json" --steps 3 --check; has "$tmp/out" ": match"
grep -q "lowers .* to another program" "$tmp/err" && bad "run lowered another program than compile" || ok
# the same plan as a hand-written (version 1) strategy file, which records no order: simulate
# and run lower it as compile would, in the faster order (the same iteration as the plan's)
/usr/bin/python3 - "$tmp/cpath.json" "$tmp/cpath-v1.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
json.dump({"format": "pcgc-strategy", "version": 1, "machine": p["machine"], "model": p["model"],
           "views": p["views"], "choice": p["choice"]}, open(sys.argv[2], "w"))
PY
expect 0 "$pcgc" simulate "$tmp/cpath.json" --machine cpu-4; it2=$(grep '^  iteration' "$tmp/out")
expect 0 "$pcgc" simulate "$tmp/cpath-v1.json" --machine cpu-4; it1=$(grep '^  iteration' "$tmp/out")
[ -n "$it1" ] && [ "$it1" = "$it2" ] && ok || bad "the version 1 file was lowered otherwise: '$it1' against '$it2'"
expect 0 "$pcgc" run "$tmp/cpath-v1.json" --steps 3 --check; has "$tmp/out" ": match"
# a LLaMA-shaped decoder (RMSNorm, SwiGLU): compile's plan, and Megatron with the SwiGLU split
expect 0 "$pcgc" compile "$src/models/decoder-small.pcg" --machine cpu-4 --set LAYERS=2 -o "$tmp/dec4.json"
expect 0 "$pcgc" run "$tmp/dec4.json" --steps 2 --check --optimizer sgd; has "$tmp/out" ": match"
expect 0 "$pcgc" compile "$src/models/decoder-small.pcg" --machine cpu-2 --set LAYERS=2 --choice tp=2 --budget 0 \
  -o "$tmp/dectp.json"
# megatron_swiglu split both layers' feed-forward (its rewrite names the SiLU on a shard "_ap")
[ "$(grep -o 'gate_ap = silu' "$tmp/dectp.json" | wc -l)" = 2 ] && ok || bad "SwiGLU was not split: $(grep -o '[a-z0-9_.]* = silu([^)]*)' "$tmp/dectp.json")"
expect 0 "$pcgc" run "$tmp/dectp.json" --steps 2 --check --optimizer sgd; has "$tmp/out" ": match"
# a mixture-of-experts decoder: compile's plan, and expert parallelism (tp splits the experts)
# with data parallelism, whose group-to-expert re-sharding is the all-to-all
expect 0 "$pcgc" compile "$src/models/moe-small.pcg" --machine cpu-4 --set S=32 --set CAP=10 -o "$tmp/moe4.json"
expect 0 "$pcgc" run "$tmp/moe4.json" --steps 2 --check --optimizer sgd; has "$tmp/out" ": match"
expect 0 "$pcgc" compile "$src/models/moe-small.pcg" --machine cpu-4 --set S=32 --set CAP=10 --choice dp=2,tp=2 \
  --budget 0 -o "$tmp/moeep.json"
[ "$(grep -o 'g_xp = partition(h.[01].xs, dim=1, degree=2)' "$tmp/moeep.json" | wc -l)" = 2 ] && ok \
  || bad "the experts were not split: $(grep -o '[a-z0-9_.]* = expert_linear([^)]*)' "$tmp/moeep.json")"
expect 0 "$pcgc" run "$tmp/moeep.json" --steps 2 --check; has "$tmp/out" ": match"
# the plan's optimizer (compile's default, adam) is run's default
expect 0 "$pcgc" run "$tmp/transformer-block4.json" --steps 3 --check
has "$tmp/out" "4 processes (1 BLAS thread each): adam, 3 steps"; has "$tmp/out" ": match"
# a plan compiled for sgd holds no optimizer state: adam lowers it again, and says so
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-2 --optimizer sgd -o "$tmp/mlpsgd.json"
expect 0 "$pcgc" run "$tmp/mlpsgd.json" --steps 2 --optimizer adam --check
has "$tmp/err" "compiled for sgd; lowered again with adam's state"; has "$tmp/out" ": match"
# a launcher with another process count than the plan's devices: refused, with the fix
expect 1 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
  mpirun -np 3 "$pcgc" run "$tmp/mlp4.json" --steps 1
has "$tmp/err" "is a plan for 4 devices, but 3 processes were started"; has "$tmp/err" "mpirun -np 4"
# the plan records its devices: a plan for a machine file run anywhere needs no machine
sed 's/^name cpu-4$/name my-cluster/' "$src/machines/cpu-4.machine" >"$tmp/my.machine"
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine "$tmp/my.machine" --choice dp=4 --budget 0 -o "$tmp/my.json"
expect 0 "$pcgc" run "$tmp/my.json" --steps 1
expect 0 "$pcgc" plan show "$tmp/mlp4.json"
has "$tmp/out" "program: 4 devices"
# --trace: the last step of every process, one event per instruction, beside the prediction's
expect 0 "$pcgc" run "$tmp/mlp4.json" --steps 2 --trace "$tmp/run-trace.json"
has "$tmp/out" "trace of step 2 written to $tmp/run-trace.json"
expect 0 "$pcgc" simulate "$tmp/mlp4.json" --machine cpu-4 --trace "$tmp/sim-trace.json"
python3 - "$tmp/run-trace.json" "$tmp/sim-trace.json" <<'PY' && ok || bad "the run's trace does not pair with the prediction's"
import collections, json, sys
def events(path):
    ev = [e for e in json.load(open(path))["traceEvents"] if e.get("ph") == "X"]
    return collections.Counter((e["pid"], e["cat"]) for e in ev), ev
run, rev = events(sys.argv[1])
sim, _ = events(sys.argv[2])
assert run == sim, (run, sim)                       # the same instructions on the same devices
assert {e["pid"] for e in rev} == {0, 1, 2, 3}
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in rev)
assert any(e["cat"] == "forward" and e["dur"] > 0 for e in rev)
PY
python3 "$src/benchmarks/trace_diff.py" "$tmp/sim-trace.json" "$tmp/run-trace.json" --device 1 >"$tmp/diff.out" && ok ||
  bad "trace_diff failed: $(cat "$tmp/diff.out")"
has "$tmp/diff.out" "device 1: "; has "$tmp/diff.out" "forward"
# --estimate-trace: the search's estimate of the same plan, its tasks on the same devices
expect 0 "$pcgc" simulate "$tmp/mlp4.json" --machine cpu-4 --trace "$tmp/sim-trace2.json" --estimate-trace "$tmp/est-trace.json"
cmp -s "$tmp/sim-trace.json" "$tmp/sim-trace2.json" && ok || bad "--estimate-trace changed the program's trace"
python3 - "$tmp/est-trace.json" <<'PY' && ok || bad "the estimate's trace is not the plan's tasks"
import json, sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
assert {e["pid"] for e in ev} == {0, 1, 2, 3}, {e["pid"] for e in ev}
assert any(e["cat"] == "forward" and e["dur"] > 0 for e in ev)
PY
expect 2 "$pcgc" simulate "$src/models/mlp.pcg" --machine cpu-4 --estimate-trace "$tmp/x.json"
has "$tmp/err" "--estimate-trace applies to strategy files"
expect 2 "$pcgc" run "$tmp/mlp4.json" --trace; has "$tmp/err" "--trace needs a file"

# --- checkpoints: resuming repeats the uninterrupted run bit for bit
ck="$tmp/ck"; mlpdp=$tmp/mlpdp4.json
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-4 --choice dp=4 --budget 0 -o "$mlpdp"
expect 0 "$pcgc" run "$mlpdp" --steps 6 --no-dropout --save-weights "$tmp/w6.bin"
full=$(awk '/^step/ {print $4}' "$tmp/out" | tr '\n' ' ')
expect 0 "$pcgc" run "$mlpdp" --steps 4 --no-dropout --checkpoint "$ck" --every 2
has "$tmp/out" "checkpoint $ck/step-00000002.ckpt"; has "$tmp/out" "checkpoint $ck/step-00000004.ckpt"
[ "$(cat "$ck/latest")" = "step-00000004.ckpt" ] && ok || bad "latest does not name step 4"
ls "$ck" | grep -q '\.tmp' && bad "a temporary checkpoint was left behind" || ok
expect 0 "$pcgc" run "$mlpdp" --steps 6 --no-dropout --checkpoint "$ck" --resume --save-weights "$tmp/w6r.bin" --check
has "$tmp/out" "resumed after step 4"; has "$tmp/out" ": match"
resumed=$(awk '/^step/ {print $4}' "$tmp/out" | tr '\n' ' ')
want=$(echo "$full" | awk '{print $5, $6}')
[ "$resumed" = "$want " ] && ok || bad "resumed losses [$resumed] != the uninterrupted run's steps 5-6 [$want]"
cmp -s "$tmp/w6.bin" "$tmp/w6r.bin" && ok || bad "resumed weights differ from the uninterrupted run's"
# weights are stored whole: a checkpoint of data parallel resumes under tensor parallel
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine cpu-2 --choice tp=2 --budget 0 -o "$tmp/mlptp2.json"
expect 0 "$pcgc" run "$tmp/mlptp2.json" --steps 6 --no-dropout --checkpoint "$ck" --resume --optimizer adam
has "$tmp/out" "resumed after step 6"
cp -r "$ck" "$tmp/ck4"; echo step-00000004.ckpt >"$tmp/ck4/latest"
expect 0 "$pcgc" run "$tmp/mlptp2.json" --steps 6 --no-dropout --checkpoint "$tmp/ck4" --resume --check
has "$tmp/out" "resumed after step 4"; has "$tmp/out" ": match"
got=$(awk '/^step/ {print $4}' "$tmp/out" | tr '\n' ' ')
[ "$got" = "$want " ] && ok || bad "tensor-parallel resume [$got] != data parallel's steps 5-6 [$want]"
# a sharded plan resumes from data parallel's checkpoint (its slabs cut from the whole weights and
# state), and data parallel from its own (the slabs gathered): zero_resume NAME PLAN
zero_resume() {
  cp -r "$ck" "$tmp/ck-$1"; echo step-00000004.ckpt >"$tmp/ck-$1/latest"
  expect 0 "$pcgc" run "$2" --steps 6 --no-dropout --checkpoint "$tmp/ck-$1" --resume --check
  has "$tmp/out" "resumed after step 4"; has "$tmp/out" ": match"
  got=$(awk '/^step/ {print $4}' "$tmp/out" | tr '\n' ' ')
  [ "$got" = "$want " ] && ok || bad "$1 resume [$got] != data parallel's steps 5-6 [$want]"
  expect 0 "$pcgc" run "$2" --steps 4 --no-dropout --checkpoint "$tmp/ckz-$1" --every 4
  expect 0 "$pcgc" run "$mlpdp" --steps 6 --no-dropout --checkpoint "$tmp/ckz-$1" --resume
  got=$(awk '/^step/ {print $4}' "$tmp/out" | tr '\n' ' ')
  [ "$got" = "$want " ] && ok || bad "data parallel resumed from $1 [$got] != steps 5-6 [$want]"
}
zero_resume ZeRO-2 "$tmp/zero.json"   # optimizer state and gradients sharded
zero_resume ZeRO-3 "$tmp/zero3.json"  # and the weights
# refused: another optimizer, another model, a damaged file, nothing to resume
expect 1 "$pcgc" run "$mlpdp" --steps 8 --checkpoint "$tmp/ck4" --resume --optimizer sgd
has "$tmp/err" "holds the state of adam, but this run trains with sgd"
expect 0 "$pcgc" compile "$src/models/cnn.pcg" --machine cpu-2 --choice dp=2 --budget 0 -o "$tmp/cnn2dp.json"
expect 1 "$pcgc" run "$tmp/cnn2dp.json" --steps 8 --checkpoint "$tmp/ck4" --resume
has "$tmp/err" "weight"; has "$tmp/err" "written for another model"
last=$(cat "$tmp/ck4/latest")   # step 6: the tensor-parallel run saved after its last step
head -c 3000 "$ck/step-00000004.ckpt" >"$tmp/ck4/$last"
expect 1 "$pcgc" run "$mlpdp" --steps 8 --checkpoint "$tmp/ck4" --resume
has "$tmp/err" "$last:1: not a usable checkpoint: its checksum does not match"
expect 3 "$pcgc" run "$mlpdp" --steps 8 --checkpoint "$tmp/none" --resume; has "$tmp/err" "no checkpoint to resume from"
expect 2 "$pcgc" run "$mlpdp" --resume; has "$tmp/err" "--resume needs --checkpoint DIR"

# --- --data DIR: .npy files, each rank reading its rows; step s takes batch (s-1) mod batches
/usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
t = sys.argv[1]; rng = np.random.default_rng(7)
x = rng.standard_normal((150, 784)).astype(np.float32); y = rng.integers(0, 10, 150)
def save(d, xx, yy):
    import os; os.makedirs(f"{t}/{d}", exist_ok=True)
    np.save(f"{t}/{d}/x.npy", xx); np.save(f"{t}/{d}/labels.npy", yy)
save("d2", x[:128], y[:128].astype(np.int64))          # two batches of 64
save("d1", x[64:128].astype(np.float64), y[64:128].astype(np.int32))  # the second alone, other dtypes
save("short", x[:10], y[:10])
save("shape", x[:, :700], y)
save("badlabel", x[:64], np.where(np.arange(64) == 5, 12, y[:64]))
save("ints", x[:64].astype(np.int32), y[:64])
open(f"{t}/d1/x.txt", "w").write("not data")
PY
expect 0 "$pcgc" run "$mlpdp" --steps 3 --data "$tmp/d2" --no-dropout --check
has "$tmp/out" "data: $tmp/d2, 2 batches"; has "$tmp/out" ": match"
# with a learning rate too small to move a weight, step 2 sees batch 1 exactly as step 1 of d1 does
expect 0 "$pcgc" run "$mlpdp" --steps 2 --data "$tmp/d2" --no-dropout --lr 1e-30
l2=$(awk '/^step +2/ {print $4}' "$tmp/out")
expect 0 "$pcgc" run "$mlpdp" --steps 1 --data "$tmp/d1" --no-dropout --lr 1e-30
l1=$(awk '/^step +1/ {print $4}' "$tmp/out")
[ -n "$l1" ] && [ "$l1" = "$l2" ] && ok || bad "--data: step 2 of d2 ($l2) != step 1 of its second batch alone ($l1)"
# data that disagrees with the plan: refused before any process starts
expect 1 "$pcgc" run "$mlpdp" --data "$tmp/short"; has "$tmp/err" "10 samples, fewer than one batch of input 'x' (64)"
expect 1 "$pcgc" run "$mlpdp" --data "$tmp/shape"; has "$tmp/err" "shape (150, 700) does not fit input 'x', which needs (SAMPLES, 784)"
expect 1 "$pcgc" run "$mlpdp" --data "$tmp/ints"; has "$tmp/err" "input 'x' is f32, but the file holds <i4"
expect 3 "$pcgc" run "$mlpdp" --data "$tmp/nowhere"; has "$tmp/err" "x.npy"; has "$tmp/err" "DIR/NAME.npy"
cp "$tmp/d1/x.txt" "$tmp/short/x.npy"
expect 1 "$pcgc" run "$mlpdp" --data "$tmp/short"; has "$tmp/err" "not a .npy file"
expect 1 "$pcgc" run "$mlpdp" --steps 1 --data "$tmp/badlabel"; has "$tmp/err" "sample 5 holds 12, outside 0..9"

# --- faults: a killed rank ends the job at once, a hung one within --step-timeout, naming it
rankpid() { # the pid of rank $1 of a running `pcgc run $2`
  local p
  for p in $(pgrep -f "pcgc run $2"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return; }
  done
}
fault() { # fault SIGNAL RANK: run mlpdp for long, send SIGNAL to RANK once it trains; out/err/rc/secs
  "$pcgc" run "$mlpdp" --steps 100000000 --step-timeout 4 --quiet >"$tmp/out" 2>"$tmp/err" &
  local job=$! t0=$SECONDS p="" i
  for i in $(seq 100); do p=$(rankpid "$2" "$mlpdp"); [ -n "$p" ] && break; sleep 0.1; done
  sleep 2; kill "-$1" "$p"
  wait "$job"; rc=$?; secs=$((SECONDS - t0))
  kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null
}
fault KILL 1
[ "$rc" -ne 0 ] && ok || bad "a killed rank: exit 0"
has "$tmp/err" "rank 1"
[ "$secs" -le 20 ] && ok || bad "a killed rank: the job took $secs s to end"
fault STOP 2
[ "$rc" -ne 0 ] && ok || bad "a hung rank: exit 0"
has "$tmp/err" "waited more than 4 s"; has "$tmp/err" "died or hangs"
[ "$secs" -le 30 ] && ok || bad "a hung rank: the job took $secs s to end"

finish test_run
