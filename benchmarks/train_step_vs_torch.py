#!/usr/bin/python3
"""train_step_vs_torch.py — time one training step (forward, backward, SGD
update) of the shipped MLP and CNN on one CPU thread, in pcgc's reference
interpreter and in PyTorch with the same shapes, and print the ratio.

    /usr/bin/python3 benchmarks/train_step_vs_torch.py [--pcgc build/pcgc] [--steps 20]

Needs Debian's python3-torch (apt-get install python3-torch). pcgc runs with
OPENBLAS_NUM_THREADS=1, PyTorch with torch.set_num_threads(1); dropout is off
in both; each measures the mean of --steps steps after one warm-up step.
"""
import argparse
import os
import re
import subprocess
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError:
    sys.exit("this benchmark needs PyTorch: apt-get install python3-torch (and run it with /usr/bin/python3)")


def mlp():
    # models/mlp.pcg: B=64, 784 -> 512 relu -> 256 relu -> (dropout) -> 10
    net = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10))
    return net, torch.randn(64, 784), torch.randint(0, 10, (64,))


def cnn():
    # models/cnn.pcg: B=32, 3x32x32; two stages conv3x3(no bias)-BN-relu-maxpool2; 4096 -> 256 relu -> 10
    def stage(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2, 2)]
    net = nn.Sequential(*stage(3, 32), *stage(32, 64), nn.Flatten(), nn.Linear(4096, 256), nn.ReLU(),
                        nn.Linear(256, 10))
    return net, torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))


class TransformerBlock(nn.Module):
    # models/transformer-block.pcg: post-LN encoder block, E=512, 8 heads (q, k, v, out projections with
    # biases), FFN 2048 with exact GELU, layernorm eps 1e-5; its three dropouts are off (--no-dropout)
    def __init__(self, e=512, heads=8, ffn=2048):
        super().__init__()
        self.attn = nn.MultiheadAttention(e, heads, batch_first=True)
        self.n1, self.n2 = nn.LayerNorm(e), nn.LayerNorm(e)
        self.f1, self.f2 = nn.Linear(e, ffn), nn.Linear(ffn, e)

    def forward(self, x):
        n1 = self.n1(x + self.attn(x, x, x, need_weights=False)[0])
        return self.n2(n1 + self.f2(nn.functional.gelu(self.f1(n1))))


def transformer_block():
    # B=16, S=128, E=512; mse loss against a target of the output's shape
    return TransformerBlock(), torch.randn(16, 128, 512), torch.randn(16, 128, 512)


# model name (models/NAME.pcg) -> (builder, loss class)
MODELS = {"mlp": (mlp, nn.CrossEntropyLoss), "cnn": (cnn, nn.CrossEntropyLoss),
          "transformer-block": (transformer_block, nn.MSELoss)}


def torch_step_ms(make, steps):
    torch.manual_seed(0)
    net, x, y = make()
    net.train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) * 1000 / steps


def pcgc_step_ms(pcgc, model, steps):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    def run(n):
        out = subprocess.run([pcgc, "train", model, "--steps", str(n), "--no-dropout"], env=env,
                             capture_output=True, text=True, check=True).stdout
        return float(re.search(r"(\d+) steps in ([0-9.]+) s", out).group(2))
    # the first step allocates nothing extra, but warms caches: subtract a 1-step run
    t1, tn = run(1), run(steps + 1)
    return (tn - t1) * 1000 / steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pcgc", default=os.path.join(os.path.dirname(__file__), "..", "build", "pcgc"))
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    if not os.access(a.pcgc, os.X_OK):
        sys.exit(f"{a.pcgc}: not found; build pcgc first (scripts/main.sh)")
    torch.set_num_threads(1)
    root = os.path.join(os.path.dirname(__file__), "..")
    print(f"one training step (forward + backward + SGD), 1 CPU thread, mean of {a.steps} steps")
    print(f"{'model':8} {'pcgc ms':>10} {'torch ms':>10} {'pcgc/torch':>11}")
    for name, make in (("mlp", mlp), ("cnn", cnn)):
        p = pcgc_step_ms(a.pcgc, os.path.join(root, "models", name + ".pcg"), a.steps)
        t = torch_step_ms(make, a.steps)
        print(f"{name:8} {p:10.2f} {t:10.2f} {p / t:11.2f}")


if __name__ == "__main__":
    main()
