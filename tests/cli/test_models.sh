#!/usr/bin/env bash
# test_models.sh — the model zoo (docs/models.md): `pcgc check` accepts every model
# in models/ and prints the exact parameter count documented for it; the published sizes
# hold (ResNeXt-50 25.0M, Inception-v3 23.8M, BERT-Large 335M, GPT 2.7B); the consts
# documented for other configurations work; and small variants of each zoo model train
# a step with the reference interpreter.
# ctest runs: bash test_models.sh PCGC SOURCE_DIR. Exit 0 = pass.
set -uo pipefail
pcgc=${1:?usage: test_models.sh PCGC SOURCE_DIR}
src=${2:?usage: test_models.sh PCGC SOURCE_DIR}
source "$src/tests/common/cli.sh"
# params: the parameter count of the last `check` output, digits only
params() { sed -n 's/^  parameters *\([0-9,]*\).*/\1/p' "$tmp/out" | tr -d ,; }
# params_are NAME WANT: the last check printed exactly WANT parameters
params_are() {
  local got; got=$(params)
  if [ "$got" = "$2" ]; then ok; else bad "$1: parameters '$got', expected $2"; fi
}
# params_within NAME LO HI: LO < parameters < HI
params_within() {
  local got; got=$(params)
  if [ -n "$got" ] && [ "$got" -gt "$2" ] && [ "$got" -lt "$3" ]; then ok
  else bad "$1: parameters '$got' not within ($2, $3)"; fi
}
# ops_are KIND N: the last check counted N operators of KIND
ops_are() {
  local got; got=$(sed -n "s/^    $1 *\([0-9]*\)$/\1/p" "$tmp/out")
  if [ "$got" = "$2" ]; then ok; else bad "$m: $1 count '$got', expected $2"; fi
}
# trains CMD...: one or more training steps run and print a finite loss
trains() {
  expect 0 "$pcgc" train "$@"
  if grep -Eq '^step +1  loss [0-9]' "$tmp/out" && ! grep -Eqi 'nan|inf' <(grep '^step' "$tmp/out"); then ok
  else bad "train $*: no finite loss"; sed 's/^/  | /' "$tmp/out" | head -5 >&2; fi
}

# --- every model in models/ checks and carries a leading comment block and const B
zoo="resnext50 inception-v3 dlrm xdl candle-uno unity-mlp gpt-3b"
for m in $zoo mlp cnn transformer-block embedding-bag bert-large decoder-small llama3-8b llama3-70b moe-small \
  mixtral-8x7b; do
  f="$src/models/$m.pcg"
  if [ -f "$f" ]; then ok; else bad "models/$m.pcg is missing"; continue; fi
  if head -1 "$f" | grep -q '^# '; then ok; else bad "models/$m.pcg does not start with a comment"; fi
  if grep -q '^const B = ' "$f"; then ok; else bad "models/$m.pcg has no 'const B'"; fi
  if grep -qF "$m.pcg" "$src/docs/models.md"; then ok
  else bad "docs/models.md does not describe $m"; fi
done
for f in "$src"/models/*.pcg; do
  expect 0 "$pcgc" check "$f"; has "$tmp/out" "is valid"
done

# --- exact parameter counts (docs/models.md), at the default sizes
m=resnext50; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 25028904                    # torchvision resnext50_32x4d
params_within "$m" 24900000 25100000        # "25.0M"
ops_are conv2d 53; ops_are batchnorm 53
m=inception-v3; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 23834568                    # torchvision inception_v3, aux_logits=False
params_within "$m" 23750000 23850000        # "23.8M"
ops_are conv2d 94; ops_are concat 15
m=dlrm; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 256009345
ops_are embedding 4; ops_are batch_matmul 1
m=xdl; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 256131584                   # FlexFlow examples/cpp/XDL defaults, exactly
m=candle-uno; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 820948704                   # FlexFlow examples/cpp/candle_uno defaults, exactly
ops_are linear 45
m=unity-mlp; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 956301312                   # FlexFlow examples/cpp/MLP_Unify, exactly
ops_are linear 16
m=gpt-3b; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 2651553280                  # GPT-3 2.7B, tied embeddings
params_within "$m" 2600000000 2800000000    # "2.7B"
ops_are attention 32
m=bert-large; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 335143938                   # BertModel 335,141,888 + 2,050 classifier
params_within "$m" 334500000 335500000      # "335M"
m=mlp; expect 0 "$pcgc" check "$src/models/$m.pcg"; params_are "$m" 535818
m=cnn; expect 0 "$pcgc" check "$src/models/$m.pcg"; params_are "$m" 1070890
m=transformer-block; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 3152384                     # torch nn.TransformerEncoderLayer(512, 8, 2048)
m=embedding-bag; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 107362                      # tables 3 x 1000 x 32 + MLPs 11,362
ops_are embedding 3
m=decoder-small; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 982144                      # the same layers in torch.nn (no biases, k/v 64 wide)
ops_are rmsnorm 9; ops_are silu 4; ops_are attention 4
trains "$src/models/$m.pcg" --steps 2 --set LAYERS=2 --set S=16

m=llama3-8b; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 8030261248                  # Meta's Llama-3-8B, exactly
ops_are attention 32; ops_are rmsnorm 65
m=llama3-70b; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 70553706496                 # Meta's Llama-3-70B, exactly
ops_are attention 80
# a LLaMA-3 8B of 2 narrow layers trains: grouped-query attention, RoPE at base 500000
trains "$src/models/llama3-8b.pcg" --set B=2 --set S=8 --set D=32 --set HEADS=4 --set KV_HEADS=2 --set FFN=48 \
  --set LAYERS=2 --set VOCAB=50 --steps 2 --optimizer adam

m=moe-small; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 1929856                     # decoder-small's layers with 8 SwiGLU experts of 256
ops_are moe_route 2; ops_are expert_linear 6
trains "$src/models/$m.pcg" --steps 2 --set S=16 --set CAP=6
m=mixtral-8x7b; expect 0 "$pcgc" check "$src/models/$m.pcg"
params_are "$m" 46702792704                 # Hugging Face's Mixtral-8x7B-v0.1, exactly
ops_are moe_combine 32; ops_are expert_linear 96
# a Mixtral of 2 narrow layers trains: routing, capacity, experts, the balancing term
trains "$src/models/mixtral-8x7b.pcg" --set B=2 --set S=8 --set D=32 --set HEADS=4 --set KV_HEADS=2 --set FFN=48 \
  --set CAP=3 --set LAYERS=2 --set VOCAB=50 --steps 2 --optimizer adam

# --- documented alternative configurations
m=candle-uno; expect 0 "$pcgc" check "$src/models/$m.pcg" --set W=1000 --set TOWER_DEPTH=3 --set DEPTH=3
params_are "$m (public Uno sizes)" 32581000
m=dlrm; expect 0 "$pcgc" check "$src/models/$m.pcg" --set ROWS=1000
params_are "$m (1000-row tables)" 265345    # 256,009,345 - 4 x 999,000 x 64
# the batch only changes activations, not parameters
m=gpt-3b; expect 0 "$pcgc" check "$src/models/$m.pcg" --set B=1 --set S=1024
params_are "$m (B=1, S=1024)" 2651553280

# --- small variants train a step with the reference interpreter
trains "$src/models/resnext50.pcg" --set B=2 --set R=32 --steps 1
trains "$src/models/inception-v3.pcg" --set B=2 --set R=75 --steps 1
trains "$src/models/dlrm.pcg" --set ROWS=1000 --set B=8 --steps 2
trains "$src/models/xdl.pcg" --set ROWS=1000 --set B=8 --steps 2
trains "$src/models/embedding-bag.pcg" --steps 3     # the default sizes: milliseconds
trains "$src/models/candle-uno.pcg" --set W=64 --set TOWER_DEPTH=2 --set DEPTH=2 --set B=4 --steps 2
trains "$src/models/unity-mlp.pcg" --set W=64 --set IN=32 --set B=4 --steps 2
trains "$src/models/gpt-3b.pcg" --set B=2 --set S=8 --set CTX=8 --set D=32 --set HEADS=4 \
  --set LAYERS=2 --set VOCAB=50 --steps 2 --optimizer adam

finish test_models
