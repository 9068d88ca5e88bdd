#!/usr/bin/python3
"""export_models.py -- real PyTorch models exported to ONNX, with PyTorch's own counts.

    /usr/bin/python3 tests/onnx/export_models.py OUTDIR [MODEL...]

MODEL is any of: mlp cnn transformer transformer_gelu ops swiglu ops17 decoder resnet18
resnext50_32x4d inception_v3 mobilenet_v2 mobilenet_v3_small
(default: all). For each model it writes

    OUTDIR/MODEL.onnx          torch.onnx.export with a dynamic batch axis
                               (dim 0 of the input and the output is named
                               "batch"; everything else is fixed)
    OUTDIR/MODEL.json          the sidecar below
    OUTDIR/MODEL.input.f32     (the small models: mlp, cnn, transformer,
                               transformer_gelu, ops) an input batch
    OUTDIR/MODEL.output.f32    (small models) PyTorch's eval-mode output
                               for that input
    OUTDIR/MODEL.init.f32      (small models) every float
                               initializer of the ONNX file, in file order,
                               concatenated (sidecar "initializers" says
                               where each starts)
    OUTDIR/mlp_external.onnx   (with mlp) the same model with every
    OUTDIR/mlp_external.data   initializer stored as external data in one
                               file beside it (onnx.save_model,
                               save_as_external_data=True, size_threshold=0)

The .f32 files are raw little-endian IEEE-754 float32 values in row-major
(C) order, nothing else: no header, no padding. Their shapes are in the
sidecar ("io"). The output is computed in float64 (the float32 weights and
input widened to double) and rounded to float32 once at the end, so it is
PyTorch's exact result to float32 rounding (~6e-8 relative); an importer
that runs the same graph in f64 agrees to ~1e-7.

Sidecar (JSON):

    {
      "model": "resnet18", "file": "resnet18.onnx", "opset": 14,
      "torch": "1.13.0", "onnx": "1.12.0",
      "parameters": 11689512,          # sum of p.numel() over named_parameters()
      "parameter_tensors": 62,         # len(named_parameters())
      "buffers": 9600,                 # float buffers (BatchNorm running stats)
      "batchnorm_layers": 20,          # nn.BatchNorm* modules
      "layernorm_layers": 0,           # nn.LayerNorm modules
      "groupnorm_layers": 0,           # nn.GroupNorm and nn.InstanceNorm* modules
      "silu_layers": 0,                # nn.SiLU modules (absent: 0)
      "onnx_nodes": {"Conv": 20, ...}, # node count per op_type, from onnx.load
      "onnx_node_total": 69,
      "onnx_initializers": 102,
      "onnx_initializer_elements": 11699112,
      "input": {"name": "x", "shape": ["batch", 3, 224, 224]},
      "output": {"name": "y", "shape": ["batch", 1000]},
      "io": {"batch": 3, "input_shape": [3, 16], "output_shape": [3, 10],
             "input_file": "mlp.input.f32", "output_file": "mlp.output.f32",
             "init_file": "mlp.init.f32"},
      "initializers": [{"name": "fc1.weight", "dims": [32, 16], "offset": 0,
                        "transposed": true, "parameter": true,
                        "sum": 0.123, "sum_abs": 4.56}, ...]
    }

"io" and the initializers' "offset" (in elements of MODEL.init.f32) are
present only for the small models. The io batch (3) differs from the batch
the export traced (2), so matching PyTorch's output also checks that the
importer resized the symbolic batch. "initializers" lists every float
initializer: "transposed" marks the B input of a Gemm with transB=1
(nn.Linear's weight [out, in]; pcgc's linear takes [in, out], so the
importer holds that weight transposed), "parameter" that the name is one of
named_parameters() (not a BatchNorm running statistic, not a tensor the
exporter folded), "sum" and "sum_abs" the float64 sums of its values.

tests/onnx/models/ holds the outputs for mlp, cnn, transformer, ops, ops17 and decoder,
committed so that tests/onnx/test_onnx.c runs without torch; the export is
deterministic, so regenerating them changes nothing unless torch does:

    /usr/bin/python3 tests/onnx/export_models.py tests/onnx/models mlp cnn transformer ops ops17 decoder

tests/onnx/test_onnx_torch.c exports every model into a temporary folder.

Choices that keep PyTorch's counts and the ONNX file comparable:

- Every floating-point parameter and buffer is nudged by seeded noise
  before export. torch.onnx.export (1.13) deduplicates initializers with
  equal values into one initializer plus Identity nodes; with fresh
  weights every LayerNorm/BatchNorm scale is all ones and every bias all
  zeros, so the file would hold one shared tensor where PyTorch has many.
- The CNN-family models are exported with training=TrainingMode.PRESERVE
  from eval mode. The default (EVAL) folds every BatchNormalization into
  the preceding Conv (weights rescaled, a bias added), which changes the
  parameter count; PRESERVE keeps BatchNormalization nodes with their
  scale, bias, running mean and running variance.
- The transformer is exported at opset 17 so LayerNorm is one
  LayerNormalization node. transformer_gelu is the same encoder with GELU
  activations at torch's default opset 14, where LayerNorm is decomposed
  into ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add and GELU
  into Div, Erf, Add, Mul, Mul: the importer has to recognise both. ops
  uses opset 11 (Softmax, Split, Squeeze and Unsqueeze in their old forms).
  Other models use opset 14.

Models: mlp (Linear 16-32-32-10, ReLU, Tanh), cnn (two 3x3 convolutions
without batch norm, max pool, global average pool, flatten, linear),
transformer (torch.nn.TransformerEncoder, batch_first, 2 layers, d_model 32,
4 heads, feed-forward 64, dropout 0, sequence length 5), transformer_gelu
(the same with activation="gelu", opset 14), ops (see Ops below), and
torchvision's
resnet18, resnext50_32x4d and inception_v3 (aux_logits=False,
init_weights=False), all with weights=None.
"""

import argparse
import collections
import json
import math
import os
import sys
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torchvision

EXPORT_BATCH = 2   # the batch torch.onnx.export traces with
IO_BATCH = 3       # the batch of the saved input/output pair
SEED = 20240611


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.fc3 = torch.nn.Linear(32, 10)

    def forward(self, x):                       # x (B, 16)
        h = torch.relu(self.fc1(x))             # (B, 32)
        h = torch.tanh(self.fc2(h))             # (B, 32)
        return self.fc3(h)                      # (B, 10)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):                                   # x (B, 3, 16, 16)
        h = torch.relu(self.conv1(x))                       # (B, 8, 16, 16)
        h = torch.nn.functional.max_pool2d(h, 2)            # (B, 8, 8, 8)
        h = torch.relu(self.conv2(h))                       # (B, 16, 4, 4)
        h = torch.nn.functional.adaptive_avg_pool2d(h, 1)   # (B, 16, 1, 1)
        return self.fc(torch.flatten(h, 1))                 # (B, 10)


class Ops(torch.nn.Module):
    """A little of everything the importer maps, at opset 11: padded average
    pooling (Pad + AveragePool), a grouped convolution without bias, softmax
    over a middle dim, mean, concat, slices, scalar arithmetic on both
    sides, Neg, Exp, Pow, a LayerNorm over two dims (decomposed below opset
    17), GELU (decomposed), chunk (Split), transpose, a reshape computed from
    the batch size, MatMul + Add (a linear), ReduceSum."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1, groups=2, bias=False)
        self.ln = torch.nn.LayerNorm((3, 8))
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):                                          # x (B, 4, 6, 6)
        a = torch.nn.functional.avg_pool2d(x, 3, stride=1, padding=1)
        b = torch.nn.functional.max_pool2d(self.conv(a), 2)        # (B, 4, 3, 3)
        c = torch.softmax(torch.flatten(b, 2), dim=1)              # (B, 4, 9)
        e = torch.cat([c, c.mean(dim=-1, keepdim=True)], dim=-1)   # (B, 4, 10)
        f = e[:, 1:4, 2:10]                                        # (B, 3, 8)
        g = torch.sigmoid(f) * 2 - 1
        g = (1 - g) / 3 + torch.exp(-g) + g.pow(2)
        g = torch.nn.functional.gelu(self.ln(g))                   # (B, 3, 8)
        h1, h2 = g.chunk(2, dim=-1)                                # (B, 3, 4) x 2
        h = torch.cat([h2, h1], dim=-1).transpose(1, 2)            # (B, 8, 3)
        h = h.reshape(h.shape[0], 3, 8)
        return self.fc(h).sum(dim=1)                               # (B, 5)


class RMSNorm(torch.nn.Module):
    """Hugging Face's LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then the
    weight; exported as Pow -> ReduceMean -> Add -> Sqrt -> Div(1, .) (or
    Reciprocal) -> Mul -> Mul, which the importer fuses into rmsnorm."""

    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class SwiGLU(torch.nn.Module):
    """A LLaMA-style pre-norm feed-forward block: RMSNorm, then
    silu(x W1) * (x W3) W2, with torch's SiLU exported as Sigmoid + Mul (no
    ONNX operator before opset 23), next to a plain sigmoid that is
    multiplied by something else, and a LeakyRelu."""

    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(16)
        self.w1 = torch.nn.Linear(16, 24, bias=False)
        self.w3 = torch.nn.Linear(16, 24, bias=False)
        self.w2 = torch.nn.Linear(24, 16, bias=False)
        self.act = torch.nn.SiLU()

    def forward(self, x):                                      # x (B, 5, 16)
        n = self.norm(x)
        h = self.act(self.w1(n)) * self.w3(n)                  # (B, 5, 24)
        y = self.w2(h)                                         # (B, 5, 16)
        return torch.nn.functional.leaky_relu(y, 0.2) * torch.sigmoid(x)   # a gate, not a SiLU


class Ops17(torch.nn.Module):
    """The operators issue 16 asks for, at opset 17: convolutions at every
    group count (1, 2, 4, depthwise, depthwise with two outputs per input),
    HardSwish, HardSigmoid, LeakyRelu, a max pool with ceil_mode=1 that adds
    a window, Clip with both bounds and with one,
    GroupNorm (Reshape -> InstanceNormalization -> Reshape -> Mul -> Add),
    InstanceNorm2d with affine parameters, Pow 3 and -0.5, Sqrt, Reciprocal,
    a constant divided by a tensor, GELU (Erf, decomposed below opset 20),
    SiLU (Sigmoid + Mul), ReduceMax (amax) next to ReduceMean, Slice,
    Gather of one index and of consecutive ones, LogSoftmax, a parameter
    expanded to the batch (as ViT's class token: not folded into a weight
    of the batch's size)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.conv4 = torch.nn.Conv2d(8, 8, 1, groups=4)
        self.dw = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.dw2 = torch.nn.Conv2d(8, 16, 3, padding=1, stride=2, groups=8)
        self.gn = torch.nn.GroupNorm(4, 16)
        self.inorm = torch.nn.InstanceNorm2d(16, affine=True)
        self.fc = torch.nn.Linear(16, 7)
        self.act = torch.nn.SiLU()
        self.token = torch.nn.Parameter(torch.randn(1, 5))

    def forward(self, x):                                          # x (B, 4, 8, 8)
        F = torch.nn.functional
        h = F.hardswish(self.conv2(self.conv1(x)))                 # (B, 8, 8, 8)
        h = F.max_pool2d(h, 3, stride=2, ceil_mode=True)           # (B, 8, 4, 4): 3 without ceil
        h = F.hardsigmoid(self.conv4(h)) * h
        h = F.leaky_relu(self.dw(h), 0.1)
        h = torch.clamp(self.dw2(h), -1.5, 2.0)                    # (B, 16, 2, 2)
        h = self.inorm(self.gn(h)).clamp(min=-0.5)
        q = h * h + 1
        h = h.pow(3) * 0.1 + torch.sqrt(q) + q.pow(-0.5) + torch.reciprocal(q + 1) + 3 / q
        h = self.act(F.gelu(h))
        z = self.fc(h.mean((2, 3)) + h.amax((2, 3)))               # (B, 7)
        z = z[:, 1:6] + z[:, [2, 3, 4, 5, 6]]                      # (B, 5)
        z = z + self.token.expand(z.shape[0], -1)                  # a parameter grown to the batch
        return F.log_softmax(z, dim=-1) + z[:, 0].unsqueeze(-1)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class DecoderLayer(torch.nn.Module):
    """A LLaMA decoder layer in plain torch: pre-norm RMSNorm, causal
    grouped-query attention (4 query heads sharing 2 key/value heads, each
    repeated for its query heads with expand + reshape, as Hugging Face's
    repeat_kv), rotary position embeddings in the rotate-half form on q and
    k, masked_fill(mask, -inf) before the softmax, then a SwiGLU
    feed-forward; no biases."""

    def __init__(self, d=32, heads=4, kv_heads=2, ffn=64):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.attn_norm = RMSNorm(d)
        self.wq = torch.nn.Linear(d, heads * self.hd, bias=False)
        self.wk = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wv = torch.nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wo = torch.nn.Linear(heads * self.hd, d, bias=False)
        self.ffn_norm = RMSNorm(d)
        self.w1 = torch.nn.Linear(d, ffn, bias=False)
        self.w3 = torch.nn.Linear(d, ffn, bias=False)
        self.w2 = torch.nn.Linear(ffn, d, bias=False)
        self.act = torch.nn.SiLU()

    def forward(self, x, cos, sin, mask):                       # x (B, T, d)
        B, T, _ = x.shape
        H, K, hd = self.heads, self.kv_heads, self.hd
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, H, hd).transpose(1, 2)        # (B, H, T, hd)
        k = self.wk(h).view(B, T, K, hd).transpose(1, 2)        # (B, K, T, hd)
        v = self.wv(h).view(B, T, K, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k[:, :, None].expand(B, K, H // K, T, hd).reshape(B, H, T, hd)
        v = v[:, :, None].expand(B, K, H // K, T, hd).reshape(B, H, T, hd)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)           # (B, H, T, T)
        p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
        o = (p @ v).transpose(1, 2).reshape(B, T, H * hd)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.w2(self.act(self.w1(h)) * self.w3(h))


class Decoder(torch.nn.Module):
    """A small causal decoder (LLaMA's architecture): two DecoderLayers
    (d 32), a final RMSNorm and an output projection to 40 logits, from
    token embeddings (B, 6, 32). The rotary tables (theta 10000) and the
    causal mask are buffers, not parameters."""

    def __init__(self, d=32, layers=2, vocab=40, seq=6, theta=10000.0):
        super().__init__()
        self.layers = torch.nn.ModuleList(DecoderLayer(d) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)
        hd = self.layers[0].hd
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)                     # (T, hd)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self.register_buffer("mask", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):                                       # x (B, T, d)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        return self.head(self.norm(x))                          # (B, T, 40)


def transformer(activation="relu"):
    layer = torch.nn.TransformerEncoderLayer(
        d_model=32, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True,
        activation=activation)
    return torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


# name -> (constructor, input shape without batch, opset, export mode, has io)
PRESERVE = torch.onnx.TrainingMode.PRESERVE
EVAL = torch.onnx.TrainingMode.EVAL
MODELS = collections.OrderedDict([
    ("mlp", (MLP, (16,), 14, EVAL, True)),
    ("cnn", (SmallCNN, (3, 16, 16), 14, EVAL, True)),
    ("transformer", (transformer, (5, 32), 17, EVAL, True)),
    ("transformer_gelu", (lambda: transformer("gelu"), (5, 32), 14, EVAL, True)),
    ("ops", (Ops, (4, 6, 6), 11, EVAL, True)),
    ("swiglu", (SwiGLU, (5, 16), 14, EVAL, True)),
    ("ops17", (Ops17, (4, 8, 8), 17, EVAL, True)),
    ("decoder", (Decoder, (6, 32), 17, EVAL, True)),
    ("resnet18", (lambda: torchvision.models.resnet18(weights=None),
                  (3, 224, 224), 14, PRESERVE, False)),
    ("resnext50_32x4d", (lambda: torchvision.models.resnext50_32x4d(weights=None),
                         (3, 224, 224), 14, PRESERVE, False)),
    ("inception_v3", (lambda: torchvision.models.inception_v3(
        weights=None, aux_logits=False, init_weights=False), (3, 299, 299), 14, PRESERVE, False)),
    # ReLU6 (exported as Clip to [0, 6]), depthwise convolutions
    ("mobilenet_v2", (lambda: torchvision.models.mobilenet_v2(weights=None),
                      (3, 224, 224), 14, PRESERVE, False)),
    # HardSwish, HardSigmoid in squeeze-and-excitation blocks
    ("mobilenet_v3_small", (lambda: torchvision.models.mobilenet_v3_small(weights=None),
                            (3, 224, 224), 14, PRESERVE, False)),
])


def persistent_buffers(model):
    """Buffers of the state dict: running statistics, not tables the model
    derives from its configuration (the decoder's rotary tables)."""
    keep = set(model.state_dict())
    return [b for n, b in model.named_buffers() if n in keep]


def nudge(model, gen):
    """Adds U(0, 0.01) noise to every float parameter and persistent buffer
    (see above). Positive noise keeps BatchNorm's running variance positive."""
    with torch.no_grad():
        for t in list(model.parameters()) + persistent_buffers(model):
            if t.is_floating_point():
                t.add_(torch.rand(t.shape, generator=gen) * 0.01)


def dims_of(value_info):
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        out.append(d.dim_param if d.HasField("dim_param") else d.dim_value)
    return out


def write_f32(path, array):
    np.ascontiguousarray(array, dtype="<f4").tofile(path)


def export(name, outdir):
    ctor, in_shape, opset, mode, has_io = MODELS[name]
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    model = ctor()
    nudge(model, gen)
    model.eval()

    path = os.path.join(outdir, name + ".onnx")
    x = torch.randn((EXPORT_BATCH,) + in_shape, generator=gen)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # PRESERVE warns about constant folding
        torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                          opset_version=opset, training=mode)

    m = onnx.load(path)
    onnx.checker.check_model(m)
    init_names = {t.name for t in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in init_names]
    assert len(inputs) == 1 and len(m.graph.output) == 1, name
    counts = collections.Counter(n.op_type for n in m.graph.node)
    params = list(model.named_parameters())
    n_params = sum(p.numel() for _, p in params)
    n_buffers = sum(b.numel() for b in persistent_buffers(model) if b.is_floating_point())
    init_elems = sum(int(np.prod(t.dims)) for t in m.graph.initializer)
    side = collections.OrderedDict([
        ("model", name),
        ("file", name + ".onnx"),
        ("opset", max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx"))),
        ("torch", torch.__version__),
        ("onnx", onnx.__version__),
        ("parameters", n_params),
        ("parameter_tensors", len(params)),
        ("buffers", n_buffers),
        ("batchnorm_layers", sum(isinstance(mod, torch.nn.modules.batchnorm._BatchNorm)
                                 for mod in model.modules())),
        ("layernorm_layers", sum(isinstance(mod, torch.nn.LayerNorm) for mod in model.modules())),
        ("groupnorm_layers", sum(isinstance(mod, (torch.nn.GroupNorm, torch.nn.modules.instancenorm._InstanceNorm))
                                 for mod in model.modules())),
        ("silu_layers", sum(isinstance(mod, torch.nn.SiLU) for mod in model.modules())),
        ("onnx_nodes", collections.OrderedDict(sorted(counts.items()))),
        ("onnx_node_total", len(m.graph.node)),
        ("onnx_initializers", len(m.graph.initializer)),
        ("onnx_initializer_elements", init_elems),
        ("input", {"name": inputs[0].name, "shape": dims_of(inputs[0])}),
        ("output", {"name": m.graph.output[0].name, "shape": dims_of(m.graph.output[0])}),
    ])
    # The file must hold every parameter exactly once (no deduplication, no
    # folding): parameters plus running statistics.
    if init_elems != n_params + n_buffers:
        sys.exit(f"{name}: initializers were deduplicated ({init_elems} elements, "
                 f"{n_params} parameters + {n_buffers} buffers)")

    if has_io:
        xin = torch.randn((IO_BATCH,) + in_shape, generator=gen)
        with torch.no_grad():
            y = model.double()(xin.double()).float()
        write_f32(os.path.join(outdir, name + ".input.f32"), xin.numpy())
        write_f32(os.path.join(outdir, name + ".output.f32"), y.numpy())
        side["io"] = collections.OrderedDict([
            ("batch", IO_BATCH),
            ("input_shape", list(xin.shape)),
            ("output_shape", list(y.shape)),
            ("input_file", name + ".input.f32"),
            ("output_file", name + ".output.f32"),
        ])
    # Every float initializer: where its values are (small models), whether
    # pcgc holds it transposed, whether it is a PyTorch parameter, and the
    # sum of its values (checks the weights of the big models cheaply: a sum
    # does not depend on the layout).
    # pcgc's linear takes its weight as [K, N]: the B of a Gemm with transB=1
    # ([N, K], nn.Linear's layout) is held transposed.
    trans_b = {n.input[1] for n in m.graph.node if n.op_type == "Gemm" and any(
        a.name == "transB" and a.i == 1 for a in n.attribute)}
    param_names = {n for n, _ in params}
    inits, values, offset = [], [], 0
    for t in m.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        a = onnx.numpy_helper.to_array(t).astype(np.float64)
        e = collections.OrderedDict([("name", t.name), ("dims", list(t.dims))])
        if has_io:
            e["offset"] = offset
            values.append(a.reshape(-1))
            offset += a.size
        e["transposed"] = t.name in trans_b
        e["parameter"] = t.name in param_names
        e["sum"] = float(a.sum())
        e["sum_abs"] = float(np.abs(a).sum())
        inits.append(e)
    if mode == PRESERVE and sum(e["parameter"] for e in inits) != len(params):
        sys.exit(f"{name}: not every parameter is an initializer of its own name")
    if has_io:
        side["io"]["init_file"] = name + ".init.f32"
        write_f32(os.path.join(outdir, name + ".init.f32"), np.concatenate(values))
    side["initializers"] = inits
    with open(os.path.join(outdir, name + ".json"), "w") as f:
        json.dump(side, f, indent=2)
        f.write("\n")
    if name == "mlp":
        data = os.path.join(outdir, "mlp_external.data")
        if os.path.exists(data):
            os.remove(data)   # onnx.save_model appends to it
        onnx.save_model(m, os.path.join(outdir, "mlp_external.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="mlp_external.data",
                        size_threshold=0)
    print(f"{name}: {n_params} parameters, {len(m.graph.node)} ONNX nodes, "
          f"{os.path.getsize(path)} bytes -> {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("models", nargs="*", metavar="MODEL", help=" ".join(MODELS))
    args = ap.parse_args()
    for name in args.models:
        if name not in MODELS:
            ap.error(f"unknown model '{name}' (known: {' '.join(MODELS)})")
    os.makedirs(args.outdir, exist_ok=True)
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    for name in args.models or list(MODELS):
        export(name, args.outdir)


if __name__ == "__main__":
    main()
