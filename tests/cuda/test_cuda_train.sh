#!/usr/bin/env bash
# test_cuda_train.sh — plans trained on the CUDA backend (`pcgc run --backend
# cuda`) against the single-process CPU reference interpreter (--check):
#   - every small model compiled for one GPU, 3 steps of SGD (and Adam, and
#     activation recomputation once);
#   - checkpoint and resume on the GPU repeat the uninterrupted run bit for bit;
#   - with mpirun: a 2-device data-parallel and tensor-parallel plan as two
#     processes (on two GPUs where the node has them, else sharing one);
#   - without MPI: the tensor-parallel plan's two processes meeting over TCP
#     (PCGC_RENDEZVOUS), their messages through NCCL;
#   - a GPU plan where no GPU is present is refused with a clear message.
# ctest runs: bash test_cuda_train.sh PCGC SOURCE_DIR SMOKE (test_cuda_smoke,
# which exits 77 without a GPU). Exit 0 = pass, 77 = skipped.
set -uo pipefail
pcgc=${1:?usage: test_cuda_train.sh PCGC SOURCE_DIR SMOKE}
src=${2:?usage: test_cuda_train.sh PCGC SOURCE_DIR SMOKE}
smoke=${3:?usage: test_cuda_train.sh PCGC SOURCE_DIR SMOKE}
source "$src/tests/common/cli.sh"
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0}:detect_leaks=0

# a machine of one H100 (the dgx-h100 preset cut down), and of two
sed 's/^name .*/name h100-1/; s/^devices_per_node .*/devices_per_node 1/' "$src/machines/dgx-h100.machine" >"$tmp/h100-1.machine"
sed 's/^name .*/name h100-2/; s/^devices_per_node .*/devices_per_node 2/' "$src/machines/dgx-h100.machine" >"$tmp/h100-2.machine"

"$smoke" >"$tmp/smoke" 2>&1
if [ $? -eq 77 ]; then
  # no GPU: a GPU plan says so and fails; --backend cpu runs it
  expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine "$tmp/h100-1.machine" --budget 0 -o "$tmp/g.json"
  expect 1 "$pcgc" run "$tmp/g.json";       has "$tmp/err" "on the cuda backend"
  grep -q "built without the CUDA backend\|no usable CUDA device" "$tmp/err" && ok || bad "no reason given: $(cat "$tmp/err")"
  expect 0 "$pcgc" run "$tmp/g.json" --backend cpu --check
  # a GPU profile needs a GPU, in any precision; a CPU machine takes only f32
  expect 1 "$pcgc" profile "$src/models/mlp.pcg" --machine "$tmp/h100-1.machine" --precision tf32 -o "$tmp/p.json"
  grep -q "built without the CUDA backend\|no usable CUDA device" "$tmp/err" && ok || bad "profile without a GPU: $(cat "$tmp/err")"
  [ ! -e "$tmp/p.json" ] && ok || bad "a failed profile wrote its database"
  expect 2 "$pcgc" profile "$src/models/mlp.pcg" --machine cpu-local --precision bf16 -o "$tmp/p.json"
  has "$tmp/err" "needs a GPU machine"
  finish test_cuda_train
  echo "no GPU: the GPU runs were skipped"
  exit 77
fi
head -3 "$tmp/smoke"

tol=1e-3   # f32 on the GPU against f32 on the CPU, 3 steps: summation order differs
for m in mlp cnn transformer-block embedding-bag unity-mlp; do
  expect 0 "$pcgc" compile "$src/models/$m.pcg" --machine "$tmp/h100-1.machine" --budget 0 --optimizer sgd -o "$tmp/$m.json"
  expect 0 "$pcgc" run "$tmp/$m.json" --steps 3 --check --tolerance $tol
  has "$tmp/out" "NVIDIA"
  has "$tmp/out" "match"
  grep -E "^running|check against" "$tmp/out" | sed "s/^/  $m: /"
done
# adam, and recomputation
expect 0 "$pcgc" run "$tmp/transformer-block.json" --optimizer adam --steps 3 --check --tolerance $tol
has "$tmp/out" "match"
expect 0 "$pcgc" compile "$src/models/cnn.pcg" --machine "$tmp/h100-1.machine" --choice dp=1,recompute --budget 0 \
  --optimizer sgd -o "$tmp/cnn-rc.json"
expect 0 "$pcgc" run "$tmp/cnn-rc.json" --steps 3 --check --tolerance $tol
has "$tmp/out" "match"

# tensor-core arithmetic against the f32 reference: TF32 keeps 10 mantissa bits, bf16 7
# (and bf16 stores activations and their gradients in bf16: mixed precision)
for pt in tf32:1e-2 bf16:5e-2; do
  p=${pt%%:*} t=${pt#*:}
  expect 0 "$pcgc" compile "$src/models/transformer-block.pcg" --machine "$tmp/h100-1.machine" --budget 0 \
    --optimizer sgd --precision $p -o "$tmp/tb-$p.json"
  has "$tmp/tb-$p.json" "\"precision\""
  expect 0 "$pcgc" run "$tmp/tb-$p.json" --steps 3 --check --tolerance $t
  has "$tmp/out" "match"
  has "$tmp/out" ", $p"
  grep -E "check against" "$tmp/out" | sed "s/^/  transformer-block $p: /"
done
has "$tmp/out" "activations stored in bf16"
# bf16 storage on a decoder (RMSNorm, rotary embeddings, grouped-query attention)
expect 0 "$pcgc" compile "$src/models/decoder-small.pcg" --machine "$tmp/h100-1.machine" --budget 0 --optimizer sgd \
  --precision bf16 -o "$tmp/dec-bf16.json"
expect 0 "$pcgc" run "$tmp/dec-bf16.json" --steps 3 --check
has "$tmp/out" "match"
grep -E "check against" "$tmp/out" | sed "s/^/  decoder-small bf16: /"

# a profile measured in the plan's precision: the simulator takes its kernels as measured
expect 0 "$pcgc" profile "$src/models/transformer-block.pcg" --machine "$tmp/h100-1.machine" --precision tf32 \
  -o "$tmp/tb-tf32.prof"
has "$tmp/out" "measured in tf32"
expect 0 "$pcgc" simulate "$tmp/tb-tf32.json" --machine "$tmp/h100-1.machine"
roof=$(awk '/^  iteration/ {print $2, $3; exit}' "$tmp/out")
expect 0 "$pcgc" simulate "$tmp/tb-tf32.json" --machine "$tmp/h100-1.machine" --profile "$tmp/tb-tf32.prof"
prof=$(awk '/^  iteration/ {print $2, $3; exit}' "$tmp/out")
echo "  transformer-block tf32: roofline $roof, profiled $prof"
[ -n "$prof" ] && [ "$prof" != "$roof" ] && ok || bad "the tf32 profile changed nothing ($roof, $prof)"

# checkpoint after 2 of 4 steps, resume: the same weights as 4 steps at once
expect 0 "$pcgc" run "$tmp/mlp.json" --steps 4 --save-weights "$tmp/w4"
expect 0 "$pcgc" run "$tmp/mlp.json" --steps 2 --checkpoint "$tmp/ck" --every 2
expect 0 "$pcgc" run "$tmp/mlp.json" --steps 4 --checkpoint "$tmp/ck" --resume --save-weights "$tmp/w4r"
cmp -s "$tmp/w4" "$tmp/w4r" && ok || bad "resumed GPU run differs from the uninterrupted one"

# two processes over MPI (host-staged messages)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
if command -v mpirun >/dev/null; then
  for c in dp=2 tp=2; do
    expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine "$tmp/h100-2.machine" --choice $c --budget 0 \
      --optimizer sgd -o "$tmp/two.json"
    expect 0 "$pcgc" run "$tmp/two.json" --steps 3 --check --tolerance $tol
    has "$tmp/out" "match"
    grep -E "check against" "$tmp/out" | sed "s/^/  mlp $c: /"
  done
  # bf16 storage over two processes: bf16 messages, and bf16 partial sums summed by MPI (bf16_sum)
  # or NCCL, of tensor parallelism and a two-stage pipeline
  for c in dp=1,tp=2 dp=1,tp=1,pp=2,micro=2,schedule=1f1b; do
    expect 0 "$pcgc" compile "$src/models/transformer-block.pcg" --machine "$tmp/h100-2.machine" --choice $c \
      --budget 0 --optimizer sgd --precision bf16 -o "$tmp/two-bf16.json"
    expect 0 "$pcgc" run "$tmp/two-bf16.json" --steps 3 --check
    has "$tmp/out" "match"
    grep -E "check against" "$tmp/out" | sed "s/^/  transformer-block bf16 $c: /"
  done
  # NCCL refuses two processes on one GPU: forced onto one, the run fails clearly
  if [ "${gpus:-0}" -lt 2 ]; then
    "$pcgc" run "$tmp/two.json" --steps 1 --comm nccl >"$tmp/out" 2>"$tmp/err"
    [ $? -ne 0 ] && ok || bad "two processes forced onto one GPU with NCCL did not fail"
    grep -qi "nccl" "$tmp/err" && ok || bad "a refused NCCL communicator does not say so: $(head -5 "$tmp/err")"
    grep -i "nccl" "$tmp/err" | head -2 | sed "s/^/  two processes on one GPU, --comm nccl: /"
  else
    expect 0 "$pcgc" run "$tmp/two.json" --steps 3 --check --tolerance $tol --comm nccl
    has "$tmp/out" "messages over NCCL"
    has "$tmp/out" "match"
  fi
else
  echo "mpirun not found: the two-process runs were skipped"
fi

# without MPI: two processes meet over TCP (PCGC_RENDEZVOUS) and send through NCCL alone. On two
# GPUs the run matches the reference. On one, NCCL refuses the second process on the same GPU,
# which it can only see once both processes joined one communicator: the ids they exchanged
# over TCP were right
expect 0 "$pcgc" compile "$src/models/mlp.pcg" --machine "$tmp/h100-2.machine" --choice tp=2 --budget 0 \
  --optimizer sgd -o "$tmp/tcp.json"
port=$((29600 + RANDOM % 300))
tcp_run() { # RANK ARGS...: one process of the run, its output in $tmp/tcpRANK.out and .err
  local r=$1; shift
  PCGC_RENDEZVOUS=127.0.0.1:$port PCGC_RANK=$r PCGC_WORLD_SIZE=2 PCGC_LOCAL_RANK=$r PCGC_RENDEZVOUS_TIMEOUT=60 \
    timeout 180 "$pcgc" run "$tmp/tcp.json" "$@" >"$tmp/tcp$r.out" 2>"$tmp/tcp$r.err"
}
tcp_run 1 --steps 3 --check --tolerance $tol &
pid=$!
tcp_run 0 --steps 3 --check --tolerance $tol
rc0=$?
wait $pid
rc1=$?
if [ "${gpus:-0}" -ge 2 ]; then
  [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && ok || bad "two GPU processes over TCP: exits $rc0, $rc1: $(head -3 "$tmp/tcp0.err" "$tmp/tcp1.err")"
  has "$tmp/tcp0.out" "messages over NCCL, met over TCP"
  has "$tmp/tcp0.out" "match"
  grep -E "check against" "$tmp/tcp0.out" | sed "s/^/  mlp tp=2 over TCP, no MPI: /"
else
  [ $rc0 -ne 0 ] && [ $rc1 -ne 0 ] && ok || bad "two processes on one GPU over TCP did not fail: exits $rc0, $rc1"
  grep -qi "duplicate gpu" "$tmp/tcp0.err" "$tmp/tcp1.err" && ok ||
    bad "NCCL did not see both processes of the TCP rendezvous: $(head -3 "$tmp/tcp0.err" "$tmp/tcp1.err")"
  grep -hi "nccl" "$tmp/tcp0.err" "$tmp/tcp1.err" | head -2 | sed "s/^/  two processes on one GPU over TCP: /"
fi
finish test_cuda_train
