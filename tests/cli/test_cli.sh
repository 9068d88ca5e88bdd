#!/usr/bin/env bash
# test_cli.sh — the `pcgc` command line contract (docs/cli.md): help on every
# command, exit codes, error messages with positions, --set, atomic -o, and
# the numbers `check` prints for the shipped models.
# ctest runs: bash test_cli.sh PCGC SOURCE_DIR. Exit 0 = pass.
set -uo pipefail
pcgc=${1:?usage: test_cli.sh PCGC SOURCE_DIR}
src=${2:?usage: test_cli.sh PCGC SOURCE_DIR}
source "$src/tests/common/cli.sh"

# --- help and usage
expect 0 "$pcgc" --help;            has "$tmp/out" "usage: pcgc COMMAND"
expect 0 "$pcgc" --version;         has "$tmp/out" "pcgc 0."
expect 0 "$pcgc" help check;        has "$tmp/out" "usage: pcgc check MODEL"
for c in check show dot train simulate profile; do
  expect 0 "$pcgc" "$c" --help;     has "$tmp/out" "usage: pcgc $c"
  expect 0 "$pcgc" "$c" -h;         has "$tmp/out" "usage: pcgc $c"
done
expect 2 "$pcgc";                   has "$tmp/err" "usage: pcgc COMMAND"
expect 2 "$pcgc" frobnicate;        has "$tmp/err" "unknown command 'frobnicate'"
expect 2 "$pcgc" check;             has "$tmp/err" "missing MODEL"
expect 2 "$pcgc" check --bogus "$src/models/mlp.pcg"; has "$tmp/err" "unknown option '--bogus'"
expect 2 "$pcgc" check a.pcg b.pcg; has "$tmp/err" "unexpected argument 'b.pcg'"
expect 2 "$pcgc" show "$src/models/mlp.pcg" -o; has "$tmp/err" "-o needs a file name"
expect 2 "$pcgc" check "$src/models/mlp.pcg" --set B; has "$tmp/err" "--set expects NAME=VALUE"

# --- I/O errors
expect 3 "$pcgc" check "$tmp/does-not-exist.pcg"; has "$tmp/err" "does-not-exist.pcg"

# --- an empty model, or one that computes nothing: an error with a hint, not a valid model
: >"$tmp/empty.pcg"
expect 1 "$pcgc" check "$tmp/empty.pcg"; has "$tmp/err" "empty.pcg:1:1: error: the model file is empty"
has "$tmp/err" "hint: a model declares its inputs"
printf '# inputs only
model m
input x: f32[2, 3]
' >"$tmp/noop.pcg"
expect 1 "$pcgc" compile "$tmp/noop.pcg" --machine cpu-2; has "$tmp/err" "no operator, only inputs and weights"

# --- invalid model: position, caret and hint, exit 1
printf 'const B = 4\ninput x: f32[B, 8]\nh = lineer(x, out=10)\n' >"$tmp/bad.pcg"
expect 1 "$pcgc" check "$tmp/bad.pcg"
has "$tmp/err" "bad.pcg:3:5: error:"
has "$tmp/err" "lineer"
has "$tmp/err" "^"
has "$tmp/err" "hint:"
printf 'input x: f32[4, 8]\nh = linear(x, out=10)\ny = linear(x, out=3)\nz = add(h, y)\n' >"$tmp/shape.pcg"
expect 1 "$pcgc" check "$tmp/shape.pcg"
has "$tmp/err" "shape.pcg:4:"
has "$tmp/err" "do not broadcast"

# --- check on every shipped model
for m in "$src"/models/*.pcg; do
  expect 0 "$pcgc" check "$m"; has "$tmp/out" "is valid"
done
expect 0 "$pcgc" check "$src/models/bert-large.pcg"
has "$tmp/out" "parameters"
params=$(sed -n 's/^  parameters *\([0-9,]*\).*/\1/p' "$tmp/out" | tr -d ,)
if [ -n "$params" ] && [ "$params" -gt 331650000 ] && [ "$params" -lt 338350000 ]; then ok
else bad "BERT-Large parameters '$params' not within 1% of 335M"; fi
has "$tmp/out" "attention"
has "$tmp/out" "FLOPs/iter"

# --- --set overrides a constant and changes the numbers, unknown name is an error
expect 0 "$pcgc" check "$src/models/mlp.pcg"; cp "$tmp/out" "$tmp/mlp-default"
grep -q '^const B' "$src/models/mlp.pcg" || bad "models/mlp.pcg has no 'const B'"
expect 0 "$pcgc" check "$src/models/mlp.pcg" --set B=7
if cmp -s "$tmp/out" "$tmp/mlp-default"; then bad "--set B=7 changed nothing"; else ok; fi
expect 1 "$pcgc" check "$src/models/mlp.pcg" --set NOPE=3; has "$tmp/err" "NOPE"
# --batch sets const B: same numbers as --set B=...
expect 0 "$pcgc" check "$src/models/mlp.pcg" --batch 7; cp "$tmp/out" "$tmp/mlp-b7"
expect 0 "$pcgc" check "$src/models/mlp.pcg" --set B=7
if cmp -s "$tmp/out" "$tmp/mlp-b7"; then ok; else bad "--batch 7 differs from --set B=7"; fi
expect 2 "$pcgc" check "$src/models/mlp.pcg" --batch zero; has "$tmp/err" "positive integer"

# --- show: canonical form re-parses; -o writes atomically and keeps the old file on error
expect 0 "$pcgc" show "$src/models/transformer-block.pcg" -o "$tmp/tb.pcg"
expect 0 "$pcgc" check "$tmp/tb.pcg"
expect 0 "$pcgc" show "$tmp/tb.pcg"
if cmp -s "$tmp/out" "$tmp/tb.pcg"; then ok; else bad "show is not idempotent on transformer-block"; fi
cp "$tmp/tb.pcg" "$tmp/keep.pcg"
expect 1 "$pcgc" show "$tmp/bad.pcg" -o "$tmp/keep.pcg"
if cmp -s "$tmp/keep.pcg" "$tmp/tb.pcg"; then ok; else bad "a failed show -o damaged the existing file"; fi
if ls "$tmp"/keep.pcg.tmp.* >/dev/null 2>&1; then bad "temporary file left behind"; else ok; fi
expect 3 "$pcgc" show "$src/models/mlp.pcg" -o "$tmp/no-such-dir/x.pcg"

# --- dot
expect 0 "$pcgc" dot "$src/models/cnn.pcg"; has "$tmp/out" "digraph"
if command -v dot >/dev/null; then
  if dot -Tsvg "$tmp/out" >"$tmp/g.svg" 2>"$tmp/err"; then ok; else bad "dot rejected pcgc dot output"; fi
fi

# --- train: loss per step, falling; bad options; a model without a loss
expect 0 "$pcgc" train "$src/models/mlp.pcg" --steps 4 --optimizer adam --seed 3
has "$tmp/out" "step    4  loss"
l1=$(sed -n 's/^step    1  loss //p' "$tmp/out"); l4=$(sed -n 's/^step    4  loss //p' "$tmp/out")
if awk -v a="$l1" -v b="$l4" 'BEGIN { exit !(b < a) }'; then ok; else bad "mlp loss did not fall: $l1 -> $l4"; fi
expect 0 "$pcgc" train "$src/models/mlp.pcg" --steps 2 --seed 3 --optimizer adam
cp "$tmp/out" "$tmp/run1"
expect 0 "$pcgc" train "$src/models/mlp.pcg" --steps 2 --seed 3 --optimizer adam
if cmp -s <(grep '^step' "$tmp/out") <(grep '^step' "$tmp/run1"); then ok; else bad "train is not deterministic for a seed"; fi
expect 0 "$pcgc" train "$src/models/mlp.pcg" --steps 1 --batch 5; has "$tmp/out" "step    1"
expect 2 "$pcgc" train "$src/models/mlp.pcg" --optimizer rmsprop; has "$tmp/err" "sgd or adam"
expect 2 "$pcgc" train "$src/models/mlp.pcg" --steps -1
printf 'input x: f32[4, 8]\nh = linear(x, out=3)\n' >"$tmp/noloss.pcg"
expect 1 "$pcgc" train "$tmp/noloss.pcg"; has "$tmp/err" "no loss"

# --- simulate: baselines on machine presets; errors
expect 0 "$pcgc" simulate --help; has "$tmp/out" "usage: pcgc simulate"
expect 0 "$pcgc" simulate "$src/models/mlp.pcg" --machine dgx-h100
has "$tmp/out" "data-parallel on 8 devices"; has "$tmp/out" "iteration"
expect 0 "$pcgc" simulate "$src/models/mlp.pcg" --machine dgx-h100 --strategy sequential
has "$tmp/out" "sequential on 1 device"
expect 0 "$pcgc" simulate "$src/models/cnn.pcg" --machine cpu-local --trace "$tmp/trace.json"
has "$tmp/trace.json" "traceEvents"
# --recompute: the transformer block keeps fewer activations and takes longer
expect 0 "$pcgc" simulate "$src/models/transformer-block.pcg" --machine dgx-h100
act0=$(sed -n 's/.*activations \([0-9.]*\) \([KMG]i*B\).*/\1 \2/p' "$tmp/out")
expect 0 "$pcgc" simulate "$src/models/transformer-block.pcg" --machine dgx-h100 --recompute
has "$tmp/out" "activations recomputed"
act1=$(sed -n 's/.*activations \([0-9.]*\) \([KMG]i*B\).*/\1 \2/p' "$tmp/out")
if [ -n "$act0" ] && [ -n "$act1" ] && [ "$act0" != "$act1" ]; then ok; else bad "--recompute kept $act1 of activations (without: $act0)"; fi
expect 1 "$pcgc" simulate "$src/models/mlp.pcg" --machine dgx-h100 --batch 12; has "$tmp/err" "12"
expect 3 "$pcgc" simulate "$src/models/mlp.pcg" --machine dgx-h101; has "$tmp/err" "dgx-h100"
expect 2 "$pcgc" simulate "$src/models/mlp.pcg"; has "$tmp/err" "--machine"

# --- profile: measure a tiny model's kernels, then simulate with the database
printf 'model tiny\ninput x: f32[4, 8]\ninput t: f32[4, 3]\ny = linear(x, out=3)\nloss = mse(y, t)\n' >"$tmp/tiny.pcg"
expect 0 "$pcgc" profile --help; has "$tmp/out" "usage: pcgc profile"
# --cores 2: the device recorded is one thread of the 2 cores cpu-local describes, on any host
expect 0 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/tiny.json" --repeat 3 --cores 2
has "$tmp/out" "2 kernels and 6 optimizer updates measured"; has "$tmp/tiny.json" '"format":'; has "$tmp/tiny.json" '"op":	"linear"'
has "$tmp/out" "measured as 105 GFLOP/s f32 and 19 GB/s: 1 of 2 cores"
has "$tmp/tiny.json" '"version":	2'; has "$tmp/tiny.json" '"threads":	1'; has "$tmp/tiny.json" '"memory_bandwidth":	19000000000'
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --strategy sequential --profile "$tmp/tiny.json"
has "$tmp/out" "iteration"; has "$tmp/out" "profile        kernels: 2 measured, 0 from the nearest measured, 0 roofline"
# --append measures only what the database lacks; another device is refused
expect 0 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/tiny.json" --repeat 3 --cores 2 --append
has "$tmp/out" "0 kernels and 0 optimizer updates measured"; has "$tmp/out" "(8 entries, some kept"
printf 'model tiny\ninput x: f32[2, 8]\ninput t: f32[2, 3]\ny = linear(x, out=3)\nloss = mse(y, t)\n' >"$tmp/tiny2.pcg"
expect 0 "$pcgc" profile "$tmp/tiny2.pcg" --machine cpu-local -o "$tmp/tiny.json" --repeat 3 --cores 2 --append
has "$tmp/out" "2 kernels and 0 optimizer updates measured"; has "$tmp/out" "(10 entries, some kept"
expect 0 "$pcgc" profile "$tmp/tiny2.pcg" --machine cpu-local -o "$tmp/rounds.json" --repeat 3 --rounds 3
has "$tmp/out" "round 3 of 3"; has "$tmp/out" "(8 entries, machine cpu-local"
expect 2 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/x.json" --rounds 0
expect 1 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/tiny.json" --cores 4 --append
has "$tmp/err" "--append:"; has "$tmp/err" "1 of 4 cores"
# every kernel 0.5 s forward and 0.25 s backward, every update 0.5 s (its
# "forward"): on cpu-2, whose device is the one measured (a core), the
# iteration is their sum, 1.5 s of kernels + 2 updates
sed -E 's/"forward":[^,]*/"forward": 0.5/; s/"backward":[^,}]*/"backward": 0.25/' "$tmp/tiny.json" >"$tmp/slow.json"
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-2 --strategy sequential --optimizer sgd --profile "$tmp/slow.json"
has "$tmp/out" "iteration      2.5 s"
# on cpu-4 a device is half a core: twice as long (less the launch counted twice)
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-4 --strategy sequential --optimizer sgd --profile "$tmp/slow.json"
has "$tmp/out" "iteration      5 s"; has "$tmp/err" "times carried to 'cpu-4''s device, 52 GFLOP/s, 9.5 GB/s"
# on cpu-local (both cores, 2 BLAS threads) nothing is assumed faster than measured on one
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --strategy sequential --optimizer sgd --profile "$tmp/slow.json"
has "$tmp/out" "iteration      2.5 s"
# measured as the whole CPU (--threads 2): exact on cpu-local; on half a core (cpu-4) every
# kernel and update takes 4 times as long
expect 0 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/tiny2t.json" --repeat 3 --cores 2 --threads 2
has "$tmp/out" "measured as 210 GFLOP/s f32 and 38 GB/s: 2 of 2 cores"
sed -E 's/"forward":[^,]*/"forward": 0.5/; s/"backward":[^,}]*/"backward": 0.25/' "$tmp/tiny2t.json" >"$tmp/slow2t.json"
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --strategy sequential --optimizer sgd --profile "$tmp/slow2t.json"
has "$tmp/out" "iteration      2.5 s"
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-4 --strategy sequential --optimizer sgd --profile "$tmp/slow2t.json"
has "$tmp/out" "iteration      10 s"
# --copies: measured beside N - 1 copies of the measurement, as the N processes of a run on this
# host compute. 2 copies on 2 cores: the device stays one core. 4 on 2 cores take turns: the device
# is a process's share, a quarter of the host, which is cpu-4's device, so a cpu-4 plan takes the
# (mean) times as measured. The copies end with the measurement
expect 0 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/copies2.json" --repeat 3 --cores 2 --copies 2
has "$tmp/out" "measuring beside 1 copies of this measurement"
has "$tmp/out" "measured as 105 GFLOP/s f32 and 19 GB/s: 1 of 2 cores, beside the copies"
expect 0 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/copies.json" --repeat 3 --cores 2 --copies 4
has "$tmp/out" "measuring beside 3 copies of this measurement"
has "$tmp/out" "measured as 52.5 GFLOP/s f32 and 9.5 GB/s: 1 of 4 cores, one process's share; mean times"
pgrep -f "profile $tmp/tiny.pcg" >/dev/null && bad "a copy outlived pcgc profile --copies" || ok
sed -E 's/"forward":[^,]*/"forward": 0.5/; s/"backward":[^,}]*/"backward": 0.25/' "$tmp/copies.json" >"$tmp/slowc.json"
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-4 --strategy sequential --optimizer sgd --profile "$tmp/slowc.json"
has "$tmp/out" "iteration      2.5 s"
expect 2 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/x.json" --copies 0
expect 2 "$pcgc" profile "$tmp/tiny.pcg" --machine dgx-h100 -o "$tmp/x.json" --copies 2; has "$tmp/err" "--copies is for CPU machines"
# --links N: the all-reduces of N MPI processes of this host, and the link fitted to them; simulate
# on a one-node machine of N devices takes the measured all-reduce times (here doctored to 0.5 s each,
# so a data-parallel step of the tiny model, whose weight and bias share one gradient bucket, takes
# 0.5 s), another machine its own link
# (the ranks run MPI: under ASan, Open MPI's own allocations at exit are not this program's leaks)
ASAN_OPTIONS=detect_leaks=0 expect 0 "$pcgc" profile --links 2 --machine cpu-2 -o "$tmp/links.json"
has "$tmp/out" "measuring the all-reduces of 2 processes"; has "$tmp/out" "link among 2 processes, fitted to the messages:"
has "$tmp/links.json" '"messages":' 
has "$tmp/out" "(0 kernel entries, links of 1 process count)"; has "$tmp/links.json" '"devices":	2'
sed -E 's/\[([0-9]+), [0-9.e+-]+\]/[\1, 0.5]/g' "$tmp/links.json" >"$tmp/slowlinks.json"
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-2 --strategy data-parallel --optimizer sgd --profile "$tmp/slowlinks.json"
has "$tmp/err" "measured the all-reduces of 2 processes: they take the measured times"
it=$(sed -n 's/^ *iteration *\([0-9.]*\) \(s\|ms\).*/\1 \2/p' "$tmp/out")
if echo "$it" | awk '{ t = $2 == "ms" ? $1 / 1000 : $1; exit !(t >= 0.5 && t < 0.51) }'; then ok; else
  bad "a data-parallel step with one 0.5 s all-reduce took '$it'"; fi
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-4 --strategy data-parallel --optimizer sgd --profile "$tmp/slowlinks.json"
has "$tmp/err" "measured links among 2 processes, not cpu-4's 4"
# kernels and a link in one database; --append keeps what it holds
ASAN_OPTIONS=detect_leaks=0 expect 0 "$pcgc" profile --links 2 --machine cpu-local -o "$tmp/copies2.json" --append
has "$tmp/out" "wrote $tmp/copies2.json (8 kernel entries, links of 1 process count)"
# never forever: ranks that do not finish are stopped after PCGC_LINKS_TIMEOUT (here an "mpirun" that only sleeps)
printf '#!/bin/sh\nexec sleep 37\n' >"$tmp/hang-mpirun"; chmod +x "$tmp/hang-mpirun"
PCGC_MPIRUN="$tmp/hang-mpirun" PCGC_LINKS_TIMEOUT=1 expect 3 "$pcgc" profile --links 2 --machine cpu-2 -o "$tmp/x.json"
has "$tmp/err" "the 2 processes measuring the link did not finish within 1 s; stopped them"
pgrep -f "sleep 37" >/dev/null && bad "the hung launcher outlived pcgc profile --links" || ok
[ -e "$tmp/x.json" ] && bad "a database was written though the measurement failed" || ok
expect 2 "$pcgc" profile --links 1 --machine cpu-2 -o "$tmp/x.json"; has "$tmp/err" "--links takes 2 to 256"
expect 1 "$pcgc" profile --links 2 --machine dgx-h100 -o "$tmp/x.json"; has "$tmp/err" "measures MPI among CPU processes"
expect 2 "$pcgc" profile --machine cpu-2 -o "$tmp/x.json"; has "$tmp/err" "missing MODEL (or --links N alone)"
# a version 1 database (no device) is used as measured, with a warning on another machine
sed -E 's/"version":[^,]*/"version": 1/' "$tmp/slow.json" | awk '/"device":/ {skip = 1} !skip; skip && /^\t},$/ {skip = 0}' >"$tmp/v1.json"
expect 0 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-4 --strategy sequential --optimizer sgd --profile "$tmp/v1.json"
has "$tmp/out" "iteration      2.5 s"; has "$tmp/err" "times are used as measured"
printf '{"format": "pcgc-profile",' >"$tmp/bad.json"
expect 1 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --profile "$tmp/bad.json"; has "$tmp/err" "bad.json:1:"
# strict JSON: a duplicated member, invalid UTF-8 and a NUL byte, each with its position
printf '{"format": "pcgc-profile", "version": 2, "version": 2, "machine": "cpu-local", "entries": []}' >"$tmp/dup.json"
expect 1 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --profile "$tmp/dup.json"
has "$tmp/err" "dup.json:1:42: error: profile database: the member \"version\" is given twice"
printf '{"format": "pcgc-profile", "version": 2, "machine": "cpu-\xff", "entries": []}' >"$tmp/utf.json"
expect 1 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --profile "$tmp/utf.json"; has "$tmp/err" "not valid UTF-8"
printf '{"format": "pcgc-profile", "version": 2,\n "machine": "cpu-local\0", "entries": []}' >"$tmp/nul.json"
expect 1 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --profile "$tmp/nul.json"; has "$tmp/err" "nul.json:2:"
expect 3 "$pcgc" simulate "$tmp/tiny.pcg" --machine cpu-local --profile "$tmp/none.json"; has "$tmp/err" "none.json"
expect 2 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local; has "$tmp/err" "missing -o"
expect 2 "$pcgc" profile "$tmp/tiny.pcg" --machine cpu-local -o "$tmp/x.json" --repeat 0

finish test_cli
