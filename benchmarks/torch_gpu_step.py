#!/usr/bin/env python3
"""torch_gpu_step.py — time one training step (forward, backward, plain SGD
update with lr 0.01 and no momentum) in PyTorch on a CUDA GPU, for models with
exactly the shapes of pcgc's models/bert-large.pcg and models/cnn.pcg, so that
pcgc's CUDA backend can be compared with PyTorch on the same GPU.

    python3 benchmarks/torch_gpu_step.py [--models bert-large,cnn]
            [--precisions f32,tf32,bf16] [--steps 10] [--warmup 3]

Precisions: f32  — TF32 off for cuBLAS matmuls and cuDNN convolutions;
            tf32 — TF32 on for both;
            bf16 — f32 weights, forward (and loss) under
                   torch.autocast('cuda', dtype=torch.bfloat16), TF32 off.
The inputs are random, on the GPU, drawn once before timing; the model is in
train() mode (dropout on, batchnorm on batch statistics). After --warmup
untimed steps each of --steps steps is timed with a pair of CUDA events around
forward + backward + optimizer.step() + zero_grad(). Every (model, precision)
pair builds a fresh model (seed 0) and resets the peak-memory statistics, so
peak_mib counts weights, gradients and activations of that run only.

Output (stdout), a header line and then one line per (model, precision):
    # torch <version> cuda <version> gpu <device name>
    # params <model> <count>
    torch <model> <precision> median_ms <x.xx> fastest_ms <x.xx> peak_mib <n>
Lines starting with '#' are comments. Exits 77 (skip) when PyTorch or CUDA
is not available.
"""
import argparse
import contextlib
import gc
import math
import statistics
import sys
import time
import warnings

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch_gpu_step.py: PyTorch is not installed; skipping", file=sys.stderr, flush=True)
    sys.exit(77)

# Parameter counts of the .pcg files (bert-large.pcg states its own in its header comment;
# cnn: conv 3*32*9 + bn 2*32 + conv 32*64*9 + bn 2*64 + linear 4096*256+256 + linear 256*10+10).
EXPECTED_PARAMS = {"bert-large": 335_143_938, "cnn": 1_070_890}
PRECISIONS = ("f32", "tf32", "bf16")


# ------------------------------------------------------------------ bert-large
# models/bert-large.pcg: B=8, S=512, H=1024, 16 heads, FFN 4096, vocabulary 30522, 512 learned
# positions, 2 token types, 24 post-LN encoder layers, dropout 0.1, LayerNorm eps 1e-12, exact GELU,
# pooler linear+tanh on token 0, 2-class classifier, mean softmax cross-entropy.
class SelfAttention(nn.Module):
    """pcgc's attention(x, x, x, heads, dropout=p): separate q, k, v, out projections with biases
    (Xavier-uniform weights, zero biases, as pcgc initialises them), scaled dot-product softmax
    attention with dropout p on the attention probabilities."""

    def __init__(self, hidden, heads, p):
        super().__init__()
        self.heads, self.p = heads, p
        self.q, self.k, self.v, self.o = (nn.Linear(hidden, hidden) for _ in range(4))
        for lin in (self.q, self.k, self.v, self.o):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        b, s, h = x.shape
        d = h // self.heads

        def heads(t):
            return t.view(b, s, self.heads, d).transpose(1, 2)        # (B, heads, S, d)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        p = self.p if self.training else 0.0
        if hasattr(F, "scaled_dot_product_attention"):                 # PyTorch >= 2.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        else:                                                          # the same, spelled out
            a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)
            y = F.dropout(a, p, self.training) @ v
        return self.o(y.transpose(1, 2).reshape(b, s, h))


class EncoderLayer(nn.Module):
    """block encoder: x + dropout(attention) -> LayerNorm -> + dropout(FFN) -> LayerNorm.
    The FFN is linear(act=gelu) then linear, with no dropout between them (unlike
    nn.TransformerEncoderLayer, which has one there)."""

    def __init__(self, hidden, heads, ffn, p, eps):
        super().__init__()
        self.attn = SelfAttention(hidden, heads, p)
        self.drop1, self.drop2 = nn.Dropout(p), nn.Dropout(p)
        self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=eps), nn.LayerNorm(hidden, eps=eps)
        self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

    def forward(self, x):
        ln1 = self.ln1(x + self.drop1(self.attn(x)))
        return self.ln2(ln1 + self.drop2(self.down(F.gelu(self.up(ln1)))))


class BertLarge(nn.Module):
    def __init__(self, vocab=30522, pos=512, hidden=1024, heads=16, ffn=4096, layers=24, p=0.1,
                 eps=1e-12, classes=2):
        super().__init__()
        # nn.Embedding initialises normal(0, 1), as pcgc's embedding does
        self.word, self.pos, self.seg = nn.Embedding(vocab, hidden), nn.Embedding(pos, hidden), \
            nn.Embedding(2, hidden)
        self.ln = nn.LayerNorm(hidden, eps=eps)
        self.drop = nn.Dropout(p)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn, p, eps) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, classes)

    def forward(self, tokens, positions, segments):
        x = self.drop(self.ln(self.word(tokens) + self.pos(positions) + self.seg(segments)))
        for layer in self.layers:
            x = layer(x)
        pooled = torch.tanh(self.pooler(x[:, 0]))                      # the [CLS] token's state
        return self.classifier(pooled)


def bert_large(device, tiny):
    b, s, vocab = (1, 16, 30522) if tiny else (8, 512, 30522)
    net = BertLarge(vocab=vocab)
    tokens = torch.randint(0, vocab, (b, s), device=device)
    positions = torch.arange(s, device=device).unsqueeze(0).expand(b, s).contiguous()
    segments = torch.randint(0, 2, (b, s), device=device)
    labels = torch.randint(0, 2, (b,), device=device)
    return net, (tokens, positions, segments), labels


# ------------------------------------------------------------------------- cnn
# models/cnn.pcg: B=32, 3x32x32; two stages conv3x3 (padding 1, no bias) -> batchnorm (eps 1e-5,
# momentum 0.1, affine) -> relu -> max-pool 2x2 stride 2; flatten 4096 -> 256 relu -> 10;
# mean softmax cross-entropy over 10 classes.
def cnn(device, tiny):
    def stage(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.MaxPool2d(2, 2)]
    net = nn.Sequential(*stage(3, 32), *stage(32, 64), nn.Flatten(), nn.Linear(4096, 256), nn.ReLU(),
                        nn.Linear(256, 10))
    images = torch.randn(32, 3, 32, 32, device=device)
    labels = torch.randint(0, 10, (32,), device=device)
    return net, (images,), labels


MODELS = {"bert-large": bert_large, "cnn": cnn}


# ---------------------------------------------------------------------- timing
def set_tf32(on):
    with warnings.catch_warnings():        # PyTorch >= 2.9 warns that these flags will be deprecated
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


def run_one(name, precision, args, device):
    """Builds model `name`, times args.steps training steps; returns (median ms, fastest ms, params)."""
    torch.manual_seed(0)
    set_tf32(precision == "tf32")
    # build the weights directly on the device where PyTorch can (>= 2.0), else move them
    where = torch.device(device) if hasattr(torch.device, "__enter__") else contextlib.nullcontext()
    with where:
        net, inputs, labels = MODELS[name](device, args.tiny)
    net = net.to(device)
    net.train()
    params = sum(p.numel() for p in net.parameters())
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.0)
    amp = (torch.autocast(device_type=device, dtype=torch.bfloat16) if precision == "bf16"
           else contextlib.nullcontext())

    def step():
        with amp:
            loss = F.cross_entropy(net(*inputs), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.steps)]
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize()
        times = [start.elapsed_time(end) for start, end in events]
    else:
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), min(times), params


def csv_list(allowed):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"choose from {','.join(allowed)} (got {text!r})")
        return items
    return parse


def positive(text):
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def non_negative(text):
    n = int(text)
    if n < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=csv_list(tuple(MODELS)), default=list(MODELS),
                    help="comma-separated, from: " + ",".join(MODELS) + " (default: all)")
    ap.add_argument("--precisions", type=csv_list(PRECISIONS), default=list(PRECISIONS),
                    help="comma-separated, from: " + ",".join(PRECISIONS) + " (default: all)")
    ap.add_argument("--steps", type=positive, default=10, help="timed steps (default 10)")
    ap.add_argument("--warmup", type=non_negative, default=3, help="untimed steps first (default 3)")
    # self-test only: run on the CPU (wall-clock timing, peak_mib 0), and BERT with B=1, S=16
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help=argparse.SUPPRESS)
    ap.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    device = args.device
    if device == "cuda":
        if not torch.cuda.is_available():
            print("torch_gpu_step.py: CUDA is not available to PyTorch "
                  f"(torch {torch.__version__}, built with CUDA {torch.version.cuda}); "
                  "this benchmark needs an NVIDIA GPU; skipping", file=sys.stderr, flush=True)
            sys.exit(77)
        gpu = torch.cuda.get_device_name()
    else:
        gpu = "none (cpu self-test)"
    print(f"# torch {torch.__version__} cuda {torch.version.cuda} gpu {gpu}", flush=True)

    for name in args.models:
        for i, precision in enumerate(args.precisions):
            if device == "cuda":
                gc.collect()
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            median, fastest, params = run_one(name, precision, args, device)
            if params != EXPECTED_PARAMS[name]:
                print(f"torch_gpu_step.py: {name} has {params} parameters, "
                      f"models/{name}.pcg has {EXPECTED_PARAMS[name]}", file=sys.stderr, flush=True)
                sys.exit(1)
            if i == 0:
                print(f"# params {name} {params}", flush=True)
            peak = round(torch.cuda.max_memory_allocated() / 2**20) if device == "cuda" else 0
            print(f"torch {name} {precision} median_ms {median:.2f} fastest_ms {fastest:.2f} "
                  f"peak_mib {peak}", flush=True)
        # free this model's memory before the next one (run_one's locals are gone by now)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
