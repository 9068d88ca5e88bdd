#!/usr/bin/env bash
# calibrate.sh — how well the simulator predicts the reference trainer on this
# CPU. For each shipped small model on the `cpu-local` machine:
#   1. `pcgc profile` measures its kernels (f32, one BLAS thread, gradients of
#      every float input and no dropout, as `pcgc train --no-dropout` runs);
#   2. `pcgc simulate --strategy sequential --profile DB --optimizer sgd`
#      predicts one iteration;
#   3. `pcgc train --no-dropout` runs N1 and N2 steps; the measured step time
#      is (t(N2) - t(N1)) / (N2 - N1), which drops the first, cold step;
# and prints predicted, measured and the error (predicted/measured - 1).
# The issue's target is |error| <= 15%. Run on an otherwise idle machine.
#
# usage: benchmarks/calibrate.sh [PCGC_BINARY] [SOURCE_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pcgc=${1:-$here/build/pcgc}
src=${2:-$here}
export OPENBLAS_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# model  N1  N2  (the step counts keep each model's run to a few seconds)
models="mlp 100 400
cnn 5 20
transformer-block 2 6"

train_seconds() {  # model steps -> seconds of the timed loop
  "$pcgc" train "$src/models/$1.pcg" --steps "$2" --no-dropout | awk '/ steps in / {print $4}'
}

printf '%-20s %14s %14s %9s\n' model predicted measured error
fail=0
while read -r m n1 n2; do
  db=$tmp/$m.json
  "$pcgc" profile "$src/models/$m.pcg" --machine cpu-local -o "$db" --no-dropout --all-gradients --repeat 10 >/dev/null
  pred=$("$pcgc" simulate "$src/models/$m.pcg" --machine cpu-local --strategy sequential --optimizer sgd \
           --profile "$db" | awk '$1 == "iteration" {v = $2; u = $3;
             print v * (u == "s" ? 1 : u == "ms" ? 1e-3 : u == "us" ? 1e-6 : 1e-9)}')
  t1=$(train_seconds "$m" "$n1")
  t2=$(train_seconds "$m" "$n2")
  meas=$(awk -v a="$t1" -v b="$t2" -v n1="$n1" -v n2="$n2" 'BEGIN {print (b - a) / (n2 - n1)}')
  awk -v m="$m" -v p="$pred" -v x="$meas" 'BEGIN {
    e = 100 * (p / x - 1);
    printf "%-20s %11.3f ms %11.3f ms %+8.1f%%\n", m, 1e3 * p, 1e3 * x, e;
    exit (e > 15 || e < -15) }' || fail=1
done <<< "$models"
[ "$fail" = 0 ] && echo "all within 15%" || echo "some models are outside 15%"
