#!/usr/bin/env bash
# install-deps.sh — install the Debian packages pcgc needs to build and test.
#
# Idempotent: asks dpkg which packages are missing and runs apt-get only for
# those (nothing at all when everything is present). Needs root only when
# something has to be installed. The CUDA toolkit is not an apt package here:
# it is optional and found by CMake under /usr/local/cuda (see WITH_CUDA).
#
#   scripts/install-deps.sh          install what is missing
#   scripts/install-deps.sh --check  only report; exit 1 if something is missing
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config
  check uthash-dev libxxhash-dev libcjson-dev libopenblas-dev
  graphviz
  protobuf-c-compiler libprotobuf-c-dev libonnx-dev   # ONNX import (onnx/)
  clang-14 libclang-rt-14-dev   # libFuzzer builds (PCGC_FUZZ=ON)
  openmpi-bin libopenmpi-dev   # the distributed CPU runtime (runtime/, pcgc run)
  python3
  python3-torch python3-torchvision python3-onnx python3-numpy   # tests exporting PyTorch models
  python3-xxhash                # tests re-sealing edited plans (XXH3-64 checksums)
  procps                        # tests finding leftover processes (pgrep)
)

check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  "") ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) echo "install-deps.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg -s "$p" 2>/dev/null | grep -qx 'Status: install ok installed'; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: missing: ${missing[*]}"
if [ "$check_only" -eq 1 ]; then
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: error: installing packages needs root; run as root:" >&2
  echo "  sudo $0" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing: ${missing[*]}"
apt-get -o DPkg::Lock::Timeout=300 update
apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${missing[@]}"
echo "install-deps: done"
