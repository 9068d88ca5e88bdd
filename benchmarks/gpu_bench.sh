#!/usr/bin/env bash
# gpu_bench.sh — pcgc's CUDA backend on one NVIDIA GPU, measured:
#   1. bench_gpu: achieved TFLOP/s of the zoo's main GEMM and convolution
#      shapes in f32, TF32 and bf16, against the datasheet peak;
#   2. the training step (forward, backward, SGD) of BERT-Large (24 layers,
#      B 8, S 512) and of the CNN, each compiled for one H100 in each
#      precision: the time `pcgc simulate` predicts for the plan, the fastest
#      step `pcgc run` measures, and PyTorch's on the same GPU
#      (torch_gpu_step.py; skipped where python3 has no CUDA PyTorch); and
#      the prediction again from a profile database of the model's kernels
#      measured on this GPU in the plan's precision (`pcgc profile
#      --precision`).
#
#   bash benchmarks/gpu_bench.sh [BUILD] [--steps N] [--models "bert-large cnn"]
#
# BUILD is a build with -DWITH_CUDA=ON (default build). Writes nothing but
# temporary files; prints the tables. Exit 77 without a GPU.
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=build
steps=10
models="bert-large cnn"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --models) models=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    -*) echo "gpu_bench.sh: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
pcgc=$build/pcgc
[ -x "$pcgc" ] || { echo "gpu_bench.sh: no $pcgc: build first (cmake -DWITH_CUDA=ON)" >&2; exit 2; }
[ -x "$build/bench_gpu" ] || { echo "gpu_bench.sh: no $build/bench_gpu: this build has no CUDA backend" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$build/bench_gpu"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || echo "bench_gpu failed (exit $rc)"

sed 's/^name .*/name h100-1/; s/^devices_per_node .*/devices_per_node 1/' "$src/machines/dgx-h100.machine" >"$tmp/h100-1.machine"
torch_ok=0
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  torch_ok=1
  PYTHONUNBUFFERED=1 python3 "$src/benchmarks/torch_gpu_step.py" --models "$(echo $models | tr ' ' ,)" \
    --steps "$steps" >"$tmp/torch" 2>"$tmp/torch.err" || { echo "torch_gpu_step.py failed:"; tail -5 "$tmp/torch.err"; }
  head -1 "$tmp/torch"
else
  echo "python3 has no CUDA PyTorch: the PyTorch column is left out"
fi

echo
echo "training step, SGD, one GPU: predicted (pcgc simulate), measured (pcgc run, fastest of $steps), PyTorch (median, fastest)"
printf "%-11s %-5s %12s %12s %12s %9s %9s %12s %12s %9s\n" model prec "predicted ms" "profiled ms" "pcgc ms" \
  "pred/meas" "prof/meas" "torch med" "torch best" "pcgc/torch"
for m in $models; do
  for p in f32 tf32 bf16; do
    "$pcgc" profile "$src/models/$m.pcg" --machine "$tmp/h100-1.machine" --precision $p -o "$tmp/$m-$p.prof" \
      >"$tmp/profile" 2>&1 || echo "$m $p: pcgc profile failed: $(tail -2 "$tmp/profile")"
    plan=$tmp/$m-$p.json
    if ! "$pcgc" compile "$src/models/$m.pcg" --machine "$tmp/h100-1.machine" --budget 0 --optimizer sgd \
        --precision $p -o "$plan" >"$tmp/compile" 2>&1; then
      echo "$m $p: compile failed: $(tail -2 "$tmp/compile")"; continue
    fi
    pred=$("$pcgc" simulate "$plan" --machine "$tmp/h100-1.machine" 2>/dev/null |
      awk '/^  predicted/ {for (i = 1; i <= NF; i++) if ($i == "now") print $(i-2) * 1000}')
    prof=-
    [ -f "$tmp/$m-$p.prof" ] && prof=$("$pcgc" simulate "$plan" --machine "$tmp/h100-1.machine" --profile "$tmp/$m-$p.prof" \
      2>/dev/null | awk '/^  predicted/ {for (i = 1; i <= NF; i++) if ($i == "now") print $(i-2) * 1000}')
    if ! "$pcgc" run "$plan" --steps "$steps" --quiet >"$tmp/run" 2>&1; then
      echo "$m $p: pcgc run failed: $(tail -3 "$tmp/run")"; continue
    fi
    meas=$(sed -n 's/.*fastest step \([0-9.]*\) ms.*/\1/p' "$tmp/run")
    tmed=- tbest=- ratio=-
    if [ $torch_ok = 1 ]; then
      read -r tmed tbest < <(awk -v m="$m" -v p="$p" '$1 == "torch" && $2 == m && $3 == p {print $5, $7}' "$tmp/torch")
      [ -n "${tbest:-}" ] && ratio=$(awk -v a="$meas" -v b="$tbest" 'BEGIN {printf "%.2f", a / b}') || tmed=- tbest=-
    fi
    pm=$(awk -v a="${pred:-0}" -v b="${meas:-0}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}')
    fm=$(awk -v a="${prof:-0}" -v b="${meas:-0}" 'BEGIN {if (a > 0 && b > 0) printf "%.2f", a / b; else print "-"}')
    printf "%-11s %-5s %12.2f %12s %12s %9s %9s %12s %12s %9s\n" "$m" "$p" "${pred:-0}" "${prof:--}" "${meas:--}" \
      "$pm" "$fm" "$tmed" "$tbest" "$ratio"
  done
done
