#!/usr/bin/python3
"""onnx_torchvision.py -- every torchvision classification model through pcgc's ONNX importer.

    /usr/bin/python3 benchmarks/onnx_torchvision.py [--build DIR] [--max-params N]
                                                    [--markdown FILE] [MODEL...]

For every model of torchvision.models.list_models(module=torchvision.models)
(or the MODELs named), with random weights (weights=None, torch.manual_seed
fixed, every parameter and buffer nudged by seeded noise as
tests/onnx/export_models.py does, so that the exporter deduplicates
nothing):

1. exports it with torch.onnx.export at opset 17, a dynamic batch axis,
   batch 2, training=TrainingMode.PRESERVE from eval mode (so batch norms
   stay BatchNormalization nodes and keep their parameters);
2. imports it with `pcgc check FILE --batch 2` and compares the parameter
   count with PyTorch's sum(p.numel() for p in model.parameters());
3. runs one forward pass through pcgc's reference interpreter (f64,
   build/onnx_forward) and through PyTorch in float64 on the same input,
   and reports the largest absolute difference of the logits and that
   difference relative to the largest logit. pcgc's batchnorm normalises
   with the batch's statistics (docs/onnx.md), so PyTorch runs its batch
   norms in training mode and everything else (dropout, stochastic depth)
   in eval mode.

Status: ok (parameters equal and the relative difference under 1e-6),
refused (the importer's message), mismatch (parameters or values differ),
export failed. Models over --max-params parameters (default 150M:
convnext_large, regnet_y_128gf, vit_h_14, vit_l_16, vit_l_32) are skipped:
their f64 forward passes take minutes each on two shared cores, and the
ONNX files of vit_h_14 and regnet_y_128gf exceed protobuf's 2 GiB.
googlenet and inception_v3 are built with aux_logits=False (eval-mode
exports drop the auxiliary classifiers, which PyTorch would still count).
Inputs are 224x224, but 299x299 for inception_v3 and 256x256 for swin_v2_*
(their window size needs it).

Prints a table as it goes and writes it as Markdown to --markdown (default
benchmarks/onnx_torchvision.md). Takes about an hour on two idle cores.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torchvision

SEED = 20240611
BATCH = 2
OPSET = 17
TOL = 1e-6


def nudge(model, gen):
    with torch.no_grad():
        for t in list(model.parameters()) + list(model.buffers()):
            if t.is_floating_point():
                t.add_(torch.rand(t.shape, generator=gen) * 0.01)


def build(name):
    kw = {"weights": None}
    if name in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=False)
    return torchvision.models.get_model(name, **kw)


def image_size(name):
    if name == "inception_v3":
        return 299
    if name.startswith("swin_v2"):
        return 256
    return 224


def reference_mode(model):
    """Batch norms in training mode (batch statistics), the rest in eval."""
    model.eval()
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.train()
    return model


def pcgc_params(build_dir, path):
    r = subprocess.run([os.path.join(build_dir, "pcgc"), "check", path, "--batch", str(BATCH)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        msg = [line for line in (r.stderr.strip() or r.stdout.strip()).splitlines() if line.strip()]
        return None, (msg[0].replace(path + ": error: ", "") if msg else f"exit code {r.returncode}")[:240]
    m = re.search(r"parameters\s+([\d,]+)", r.stdout)
    return int(m.group(1).replace(",", "")), None


def pcgc_forward(build_dir, path, x, tmp):
    xin, yout = os.path.join(tmp, "x.f32"), os.path.join(tmp, "y.f64")
    np.ascontiguousarray(x.numpy(), dtype="<f4").tofile(xin)
    r = subprocess.run([os.path.join(build_dir, "onnx_forward"), path, str(BATCH), xin, yout],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip().splitlines() or ["?"])[0]
    return np.fromfile(yout, dtype="<f8"), None


def run_one(name, build_dir, tmp):
    t0 = time.time()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = build(name)
    nudge(model, gen)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    size = image_size(name)
    x = torch.randn((BATCH, 3, size, size), generator=gen)
    path = os.path.join(tmp, name + ".onnx")
    row = {"model": name, "params": n_params, "pcgc_params": None, "diff": None, "rel": None}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                              opset_version=OPSET, training=torch.onnx.TrainingMode.PRESERVE)
    except Exception as e:  # noqa: BLE001 -- any exporter failure is a row of the table
        row.update(status="export failed", note=str(e).splitlines()[0][:200])
        return finish(row, t0)
    got, err = pcgc_params(build_dir, path)
    if err:
        row.update(status="refused", note=err)
        return finish(row, t0)
    row["pcgc_params"] = got
    y, err = pcgc_forward(build_dir, path, x, tmp)
    os.remove(path)
    if err:
        row.update(status="refused", note="forward: " + err)
        return finish(row, t0)
    with torch.no_grad():
        want = reference_mode(model.double())(x.double())
    want = want.numpy().reshape(-1)
    if y.size != want.size:
        row.update(status="mismatch", note=f"{y.size} output values, PyTorch {want.size}")
        return finish(row, t0)
    diff = float(np.max(np.abs(y - want)))
    row["diff"] = diff
    row["rel"] = diff / max(float(np.max(np.abs(want))), 1e-300)
    notes = []
    if got != n_params:
        notes.append(f"pcgc counts {got:,} parameters")
    if not row["rel"] <= TOL:
        notes.append("forward values differ")
    row.update(status="mismatch" if notes else "ok", note="; ".join(notes))
    return finish(row, t0)


def finish(row, t0):
    row["seconds"] = time.time() - t0
    return row


def fmt(row):
    pp = f"{row['pcgc_params']:,}" if row["pcgc_params"] is not None else "-"
    d = f"{row['diff']:.2e}" if row["diff"] is not None else "-"
    r = f"{row['rel']:.1e}" if row["rel"] is not None else "-"
    return (f"| {row['model']} | {row['status']} | {row['params']:,} | {pp} | {d} | {r} | "
            f"{row['seconds']:.0f} | {row.get('note', '')} |")


HEADER = ("| model | status | PyTorch params | pcgc params | max abs diff | relative | s | note |\n"
          "|---|---|---:|---:|---:|---:|---:|---|")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--max-params", type=float, default=150e6)
    ap.add_argument("--markdown", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                       "onnx_torchvision.md"))
    ap.add_argument("models", nargs="*")
    args = ap.parse_args()
    torch.set_num_threads(2)
    names = args.models or torchvision.models.list_models(module=torchvision.models)
    rows, skipped = [], []
    print(HEADER, flush=True)
    with tempfile.TemporaryDirectory(prefix="pcgc-tv-") as tmp:
        for name in names:
            meta = torchvision.models.get_model_weights(name).DEFAULT.meta
            if meta["num_params"] > args.max_params:
                skipped.append((name, meta["num_params"]))
                continue
            row = run_one(name, args.build, tmp)
            rows.append(row)
            print(fmt(row), flush=True)
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    skip = ", ".join(f"{n} ({p / 1e6:.0f}M)" for n, p in skipped)
    with open(args.markdown, "w") as f:
        f.write(HEADER + "\n")
        for r in rows:
            f.write(fmt(r) + "\n")
        f.write(f"\n{len(rows)} models: {summary}. Skipped (over {args.max_params / 1e6:.0f}M parameters): "
                f"{skip or 'none'}.\n")
    print(f"\n{len(rows)} models: {summary}; skipped: {skip or 'none'}")


if __name__ == "__main__":
    sys.exit(main())
