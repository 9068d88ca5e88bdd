#!/usr/bin/env bash
# test.sh — install dependencies, build build/ and run every test with ctest.
#
#   scripts/test.sh [CTEST_ARGS...]   e.g. scripts/test.sh -R test_graph
#
# Works from any directory; exits non-zero when a build step or a test fails.
# Uses the same configuration as scripts/main.sh, so the two share build/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DWITH_CUDA=OFF
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2 "$@"
