#!/usr/bin/env bash
# test_onnx_doc.sh — the worked example of docs/onnx.md, run as a user would:
# tests/onnx/docs_example.py exports a small CNN with torch.onnx.export
# (dynamic batch), then the documented `pcgc check model.onnx --batch 32`
# and `pcgc show model.onnx` run on it. Every output line the document
# shows for those commands must appear in the real output (lines holding
# "…" are elisions and are skipped), plus a few exact facts (15,770
# parameters, the batch of 32 in the input type).
# Needs torch: exits 77 (skipped) when /usr/bin/python3 (or $PCGC_PYTHON)
# cannot import it.
# ctest runs: bash test_onnx_doc.sh PCGC SOURCE_DIR. Exit 0 = pass.
set -uo pipefail
pcgc=${1:?usage: test_onnx_doc.sh PCGC SOURCE_DIR}
src=${2:?usage: test_onnx_doc.sh PCGC SOURCE_DIR}
doc="$src/docs/onnx.md"

python=${PCGC_PYTHON:-/usr/bin/python3}   # Debian's, where python3-torch installs torch
if ! "$python" -c "import torch, torchvision, onnx" 2>/dev/null; then
  echo "skipped: $python cannot import torch, torchvision and onnx"
  exit 77
fi

source "$src/tests/common/cli.sh"

# documented OUTFILE COMMAND: the output lines docs/onnx.md shows after
# "$ COMMAND" in a code block, each of which must be a line of OUTFILE.
documented() {
  local shown="$tmp/shown"
  awk -v cmd="$ $2" '
    index($0, "```") == 1 { if (on) exit; next }
    $0 == cmd { on = 1; found = 1; next }
    on && /^\$ / { exit }
    on { print }
    END { if (!found) exit 1 }' "$doc" >"$shown" || { bad "docs/onnx.md does not show '\$ $2'"; return; }
  [ -s "$shown" ] || { bad "docs/onnx.md shows no output for '\$ $2'"; return; }
  while IFS= read -r line; do
    case $line in *"…"*) continue ;; esac
    if grep -qxF -- "$line" "$1"; then ok; else
      bad "'$2' does not print the documented line: $line"
      sed 's/^/  | /' "$1" | head -40 >&2
    fi
  done <"$shown"
}

# --- the user's export script (the python block of docs/onnx.md)
if (cd "$tmp" && "$python" "$src/tests/onnx/docs_example.py") >"$tmp/py" 2>"$tmp/pyerr"; then ok; else
  bad "docs_example.py failed"; sed 's/^/  | /' "$tmp/pyerr" >&2; exit 1; fi
has "$tmp/py" "15770 parameters"
[ -s "$tmp/model.onnx" ] && ok || bad "docs_example.py wrote no model.onnx"
# the document shows the script itself
while IFS= read -r line; do
  case $line in '#'*|'') continue ;; esac
  grep -qxF -- "$line" "$doc" && ok || bad "docs/onnx.md lacks the example line: $line"
done <"$src/tests/onnx/docs_example.py"

cd "$tmp" || exit 1

# --- pcgc check model.onnx --batch 32
expect 0 "$pcgc" check model.onnx --batch 32
documented "$tmp/out" "build/pcgc check model.onnx --batch 32"
has "$tmp/out" "15,770"
has "$tmp/out" "ok"
cp "$tmp/out" "$tmp/check32"
# the batch matters: 4x the input bytes of batch 8
expect 0 "$pcgc" check model.onnx --batch 8
has "$tmp/out" "15,770"
if cmp -s "$tmp/out" "$tmp/check32"; then bad "check --batch 8 prints the same as --batch 32"; else ok; fi

# --- pcgc show model.onnx (batch 1 by default)
expect 0 "$pcgc" show model.onnx
documented "$tmp/out" "build/pcgc show model.onnx"
has "$tmp/out" "f32[1, 1, 28, 28]"
cp "$tmp/out" "$tmp/model.pcg"
# the canonical text is itself a model pcgc reads
expect 0 "$pcgc" check "$tmp/model.pcg"
has "$tmp/out" "15,770"
expect 0 "$pcgc" show model.onnx --batch 32
has "$tmp/out" "f32[32, 1, 28, 28]"

# --- dot draws it; train refuses a model without a loss
expect 0 "$pcgc" dot model.onnx
has "$tmp/out" "digraph"
expect 1 "$pcgc" train model.onnx --steps 1
has "$tmp/err" "loss"

finish test_onnx_doc
