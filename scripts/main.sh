#!/usr/bin/env bash
# main.sh — install dependencies, build pcgc into build/, check BERT-Large,
# compile it for a DGX H100 (the fastest data x tensor x pipeline strategy the
# simulator predicts, verified by execution at small sizes as 8 MPI processes,
# written to build/bert-large.plan.json) and simulate that strategy, compile
# DLRM for 32 H100s (its tables on GPU groups of their own; the joint search's
# best few rewrites ranked by their programs), compile Inception-v3 for 32
# H100s (its modules' towers on GPU groups of their own) and verify it as 32
# MPI processes (over one step: the model amplifies rounding at small sizes),
# compile GPT-3 2.7B for 16 GB P100s (it
# fits pipelined in 1F1B order with its optimizer state sharded over 2 data-parallel
# copies, ZeRO-1; verified as 16 processes), compile LLaMA-3 8B (grouped-query attention) for 64
# H100s from the expert grid alone, train the shipped CNN for a few steps on
# one CPU device, then measure the kernels of the small mixture-of-experts
# decoder (top-2 routing, 8 SwiGLU experts) on this machine, compile it for
# this machine run as 4 CPU devices, data parallel 2 x experts split 2, its
# step predicted from those measurements, and run that plan as 4 MPI
# processes, checked against the single-process reference; then once more
# with activations stored in bf16 (mixed precision), checked the same way;
# finally data parallel over the 4 with optimizer state and gradients sharded
# over the copies (ZeRO-2), run and checked the same way.
#
#   scripts/main.sh
#
# Works from any directory. Builds without the CUDA backend to stay fast; for
# it, configure a separate tree: cmake -S . -B build-cuda -DWITH_CUDA=ON
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DWITH_CUDA=OFF
cmake --build build -j"$(nproc)"
build/pcgc check models/bert-large.pcg
build/pcgc compile models/bert-large.pcg --machine dgx-h100 --batch 64 --verify -o build/bert-large.plan.json
build/pcgc simulate build/bert-large.plan.json --machine dgx-h100
build/pcgc compile models/dlrm.pcg --machine h100-4x8 --batch 2048 -o build/dlrm.plan.json
build/pcgc compile models/inception-v3.pcg --machine h100-4x8 --batch 256 -o build/inception-v3.plan.json
build/pcgc verify build/inception-v3.plan.json --set R=75
build/pcgc compile models/gpt-3b.pcg --machine p100-4x4 --batch 16 -o build/gpt-3b.plan.json
build/pcgc verify build/gpt-3b.plan.json
build/pcgc compile models/llama3-8b.pcg --machine h100-8x8 --precision bf16 --budget 0
build/pcgc train models/cnn.pcg --steps 8 --optimizer adam
build/pcgc profile models/moe-small.pcg --machine cpu-4 --links 4 -o build/moe-small.cpu-4.prof
build/pcgc compile models/moe-small.pcg --machine cpu-4 --choice dp=2,tp=2 --budget 0 \
  --profile build/moe-small.cpu-4.prof -o build/moe-small.cpu-4.json
build/pcgc run build/moe-small.cpu-4.json --steps 5 --check
build/pcgc run build/moe-small.cpu-4.json --steps 5 --check --precision bf16
build/pcgc compile models/moe-small.pcg --machine cpu-4 --choice dp=4,zero=3 --budget 0 \
  -o build/moe-small.zero3.json
build/pcgc run build/moe-small.zero3.json --steps 5 --check
