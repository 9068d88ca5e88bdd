#!/usr/bin/env bash
# main.sh — install dependencies, build pcgc into build/ and check a model.
#
#   scripts/main.sh [MODEL]     (default: models/bert-large.pcg)
#
# Works from any directory. Builds without the CUDA backend to stay fast; for
# it, configure a separate tree: cmake -S . -B build-cuda -DWITH_CUDA=ON
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

model=${1:-models/bert-large.pcg}

bash scripts/install-deps.sh
cmake -S . -B build -DWITH_CUDA=OFF
cmake --build build -j"$(nproc)"
build/pcgc check "$model"
