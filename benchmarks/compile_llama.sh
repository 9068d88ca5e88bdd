#!/usr/bin/env bash
# compile_llama.sh — `pcgc compile` of LLaMA-3 8B on 64, 256 and 1,024 H100s, of
# LLaMA-3 70B on 256 and 1,024 and of Mixtral 8x7B on 256 (nodes of 8, NDR InfiniBand per GPU: machines/h100-*x8),
# bf16 mixed precision (activations stored in bf16), the models' default batch of 4M tokens (LLaMA-3: 512 sequences of 8192; Mixtral: 1024 of 4096).
# Prints one markdown table row per cell: wall time of the whole compile (searches,
# lowering and the program's simulation) and of the search (expert grid and joint
# search; a second search where the first choice's program did not fit), the predicted iteration time of the program
# pcgc run would execute, the chosen dp x tp x pp with micro-batches, schedule and
# recomputation, the largest memory of a device, and how the search got there.
#
# usage: benchmarks/compile_llama.sh [PCGC_BINARY] [SOURCE_DIR]
# About twenty minutes on 2 cores (Mixtral's compile alone about six). For comparison, the published configurations
# (NVIDIA NeMo's LLaMA-3 pretraining recipes, Megatron-LM underneath) are
# 8B: tp 1, pp 1, context parallel 2, distributed optimizer;
# 70B: tp 4, pp 4 (virtual stages 5), context parallel 2, distributed optimizer.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pcgc=${1:-$here/build/pcgc}
src=${2:-$here}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cells="llama3-8b h100-8x8
llama3-8b h100-32x8
llama3-8b h100-128x8
llama3-70b h100-32x8
llama3-70b h100-128x8
mixtral-8x7b h100-32x8"

echo "| model | GPUs | compile (wall) | search | predicted iteration | tokens/s/GPU | chosen | memory/GPU | notes |"
echo "|---|---|---|---|---|---|---|---|---|"
while read -r model mach; do
  f="$tmp/$model-$mach.txt"
  t0=$(date +%s.%N)
  "$pcgc" compile "$src/models/$model.pcg" --machine "$mach" --precision bf16 >"$f" 2>"$f.err"
  rc=$?
  t1=$(date +%s.%N)
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f s", b - a }')
  gpus=$(sed -n 's/^pcgc compile: .* (\([0-9]*\) devices)$/\1/p' "$f")
  if [ "$rc" -ne 0 ]; then
    echo "| $model | ${gpus:-?} | $wall | — | failed (exit $rc): $(head -c 200 "$f.err" | tr '\n' ' ') | | | | |"
    continue
  fi
  grid=$(sed -n 's/^candidates .*, \([0-9.]*\) s.*$/\1/p' "$f")
  joint=$(sed -n 's/^joint search .*; \([0-9.]*\) s.*$/\1/p' "$f")
  pred=$(sed -n 's/^predicted iteration time *\([0-9.]* [a-z]*\) .*/\1/p' "$f")
  secs=$(echo "$pred" | awk '{ print $1 * ($2 == "s" ? 1 : $2 == "ms" ? 1e-3 : 1e-6) }')
  tps=$(awk -v s="$secs" -v g="$gpus" 'BEGIN { if (s > 0 && g > 0) printf "%.0f", 512 * 8192 / s / g; else print "—" }')
  chosen=$(sed -n 's/^strategy: \(.*\) on [0-9]* of [0-9]* devices$/\1/p' "$f")
  mem=$(sed -n 's/^memory per device (max) *\([0-9.]* [A-Za-z]*\) of \([0-9.]* [A-Za-z]*\) usable.*/\1 of \2/p' "$f")
  notes=""
  grep -q '^OUT OF MEMORY' "$f" && notes="OUT OF MEMORY; "
  grep -q 'searching again' "$f.err" && notes="${notes}searched again with less memory ($(grep -c 'searching again' "$f.err")x); "
  grep -q 'time limit' "$f" && notes="${notes}time limit hit; "
  echo "| $model | $gpus | $wall | ${grid:-?} s (joint search ${joint:-0} s of it) | $pred | $tps | $chosen | $mem | ${notes%; } |"
done <<<"$cells"
