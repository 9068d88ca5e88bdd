#!/usr/bin/python3
"""gen_golden.py -- golden results from PyTorch for the reference interpreter.

Writes, for each small model of tests/golden/*.pcg, two files MODEL.f64.bin
and MODEL.f32.bin holding the model's initial weights and inputs and what
PyTorch computes from them: the forward pass (every named tensor, the loss
included), the gradient of the loss with respect to every weight, input
and intermediate tensor after one backward, and every weight after three
SGD steps and after three Adam steps (from the initial weights, the same
batch every step). The f64 file is a float64 run (torch default dtype
float64); the f32 file is a separate float32 run from the same weights and
inputs rounded to float32. tests/golden/test_golden.c replays all of it
with pcgc's reference interpreter. CI has no torch, so the outputs are
committed; rerun this only when a model or the format changes:

    /usr/bin/python3 tests/golden/gen_golden.py [MODEL...]   # writes tests/golden/*.bin

Each model is written here by hand with torch.nn.functional, with its
parameters held in pcgc's layouts and names (see runtime/cpu/kernels.h):
linear y = x @ W + b with W [K, N] (nn.Linear's weight transposed), conv2d
weights [O, C/g, kh, kw] as in torch, attention wq wk wv [E, E] and wo
[E, E] (nn.MultiheadAttention's in_proj/out_proj weights transposed). The
optimizers act element by element, so running torch.optim on the pcgc
layout gives the same numbers as on torch's.

Relu and max-pool have kinks: a pre-activation or a pooling window within
rounding noise of a tie could go either way in pcgc's f32 run. The script
therefore searches, per model, for the first seed whose every relu input
and every max-pool window (in all seven forward passes: initial, 3 SGD,
3 Adam, in both dtypes) clears a margin of KINK_MARGIN, and checks that the
f32 run agrees with the f64 run to F32_VS_F64_MAX.

File format (little-endian):

    "PCGT"  u32 version (1)  u32 count
    count times:
      u32 name_len, name bytes (no NUL)
      u32 dtype (0 = f32, 1 = f64, 2 = i32)
      u32 rank, i64 dims[rank]
      data: prod(dims) elements of dtype, row-major

Tensor names:
    meta/sgd      f64[3]  lr, momentum, weight_decay
    meta/adam     f64[5]  lr, beta1, beta2, eps, weight_decay
    init/W        initial value of weight W (every weight of the graph)
    input/X       data input X (floats in the file's dtype, ids/labels i32)
    fwd/T         forward value of graph tensor T (fwd/loss is the loss, rank 0)
    grad/T        d loss / d T after one backward (weights, float inputs, every
                  intermediate tensor)
    sgd3/W        W after 3 SGD steps;  sgd3/loss  f[3]: the loss of each step
    adam3/W       W after 3 Adam steps; adam3/loss f[3]: likewise
"""

import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

SGD = dict(lr=0.1, momentum=0.9, weight_decay=0.01)
ADAM = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
STEPS = 3
KINK_MARGIN = 2e-5
F32_VS_F64_MAX = 1e-4

DT_CODE = {torch.float32: 0, torch.float64: 1, torch.int32: 2}


# --------------------------------------------------------------- file output

def write_bin(path, tensors):
    """tensors: list of (name, tensor); floats already in the file dtype."""
    out = [b"PCGT", struct.pack("<II", 1, len(tensors))]
    for name, t in tensors:
        t = t.detach().contiguous()
        nb = name.encode("ascii")
        out.append(struct.pack("<I", len(nb)))
        out.append(nb)
        out.append(struct.pack("<II", DT_CODE[t.dtype], t.dim()))
        out.append(struct.pack("<%dq" % t.dim(), *t.shape))
        fmt = {torch.float32: "f", torch.float64: "d", torch.int32: "i"}[t.dtype]
        out.append(struct.pack("<%d%s" % (t.numel(), fmt), *t.reshape(-1).tolist()))
    with open(path, "wb") as f:
        f.write(b"".join(out))


def read_bin(path):
    """Reads a file back (a self-check of write_bin)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"PCGT"
    version, count = struct.unpack_from("<II", data, 4)
    assert version == 1
    pos, res = 12, {}
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + n].decode("ascii")
        pos += n
        code, rank = struct.unpack_from("<II", data, pos)
        pos += 8
        dims = struct.unpack_from("<%dq" % rank, data, pos)
        pos += 8 * rank
        fmt, size, dt = {0: ("f", 4, torch.float32), 1: ("d", 8, torch.float64),
                         2: ("i", 4, torch.int32)}[code]
        numel = math.prod(dims)
        vals = struct.unpack_from("<%d%s" % (numel, fmt), data, pos)
        pos += size * numel
        res[name] = torch.tensor(vals, dtype=dt).reshape(dims)
    assert pos == len(data), "trailing bytes"
    return res


# ----------------------------------------------------------- kink tracking

class Probe:
    """Records how close relu inputs and max-pool windows come to a kink."""

    def __init__(self):
        self.relu_min = math.inf    # smallest |relu input|
        self.pool_min = math.inf    # smallest gap between a window's top two
                                    # values, over windows whose max is > 0

    def relu(self, z):
        self.relu_min = min(self.relu_min, z.detach().abs().min().item())
        return F.relu(z)

    def max_pool2d(self, z, k):
        n, c, h, w = z.shape
        win = (z.detach().reshape(n, c, h // k, k, w // k, k)
               .permute(0, 1, 2, 4, 3, 5).reshape(n, c, h // k, w // k, k * k))
        top = win.topk(2, dim=-1).values
        live = top[..., 0] > KINK_MARGIN
        if live.any():
            gap = (top[..., 0] - top[..., 1])[live].min().item()
            self.pool_min = min(self.pool_min, gap)
        return F.max_pool2d(z, k, k)

    def top_k(self, z, k):
        """torch.topk, recording the smallest gap between consecutive values
        of the top k + 1 (the order of the choices and the k-th against the
        next are what routing depends on)."""
        top = z.detach().topk(min(k + 1, z.shape[-1]), dim=-1).values
        self.pool_min = min(self.pool_min, (top[..., :-1] - top[..., 1:]).min().item())
        return z.topk(k, dim=-1)


# ------------------------------------------------------------------ models
#
# Each model: init(gen) -> (weights, inputs) as dicts of float64 / int
# tensors in pcgc names and layouts (insertion order = file order), and
# forward(W, I, probe) -> dict of named tensors, "loss" last.

def uniform(gen, shape, a):
    return (torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * a


def normal(gen, shape, s=1.0):
    return torch.randn(shape, generator=gen, dtype=torch.float64) * s


def linear_init(gen, W, name, k, n):
    # pcgc's (PyTorch's) default init for both; biases drawn, not zero, so
    # that every path carries a nonzero value.
    W[name + ".weight"] = uniform(gen, (k, n), 1 / math.sqrt(k))
    W[name + ".bias"] = uniform(gen, (n,), 1 / math.sqrt(k))


def norm_init(gen, W, name, shape):
    # scale near 1, bias near 0, but neither the identity: their gradients
    # and the normalisation's are then all exercised.
    W[name + ".scale"] = 1 + uniform(gen, shape, 0.5)
    W[name + ".bias"] = uniform(gen, shape, 0.5)


def linear(x, W, name, act=None, probe=None):
    y = x @ W[name + ".weight"] + W[name + ".bias"]
    if act == "relu":
        y = probe.relu(y)
    elif act == "gelu":
        y = F.gelu(y)   # exact (erf) form
    return y


# -- 1. mlp

def mlp_init(gen):
    W, I = {}, {}
    linear_init(gen, W, "fc1", 16, 32)
    linear_init(gen, W, "fc2", 32, 32)
    linear_init(gen, W, "logits", 32, 10)
    I["x"] = normal(gen, (8, 16))
    I["labels"] = torch.randint(0, 10, (8,), generator=gen)
    return W, I


def mlp_forward(W, I, probe):
    t = {}
    t["fc1"] = linear(I["x"], W, "fc1", "relu", probe)
    t["fc2"] = linear(t["fc1"], W, "fc2", "relu", probe)
    t["logits"] = linear(t["fc2"], W, "logits")
    t["loss"] = F.cross_entropy(t["logits"], I["labels"].long())
    return t


# -- 2. cnn

def cnn_init(gen):
    W, I = {}, {}
    a = 1 / math.sqrt(3 * 3 * 3)
    W["conv1.weight"] = uniform(gen, (8, 3, 3, 3), a)
    W["conv1.bias"] = uniform(gen, (8,), a)
    norm_init(gen, W, "bn1", (8,))
    a = 1 / math.sqrt(4 * 3 * 3)
    W["conv2.weight"] = uniform(gen, (8, 4, 3, 3), a)
    W["conv2.bias"] = uniform(gen, (8,), a)
    linear_init(gen, W, "logits", 8, 10)
    I["x"] = normal(gen, (4, 3, 8, 8))
    I["labels"] = torch.randint(0, 10, (4,), generator=gen)
    return W, I


def cnn_forward(W, I, probe):
    t = {}
    t["conv1"] = F.conv2d(I["x"], W["conv1.weight"], W["conv1.bias"], padding=1)
    # BatchNorm2d in training mode: batch statistics, biased variance.
    t["bn1"] = F.batch_norm(t["conv1"], None, None, W["bn1.scale"], W["bn1.bias"],
                            training=True, momentum=0.1, eps=1e-5)
    t["act1"] = probe.relu(t["bn1"])
    t["pool1"] = probe.max_pool2d(t["act1"], 2)
    t["conv2"] = probe.relu(F.conv2d(t["pool1"], W["conv2.weight"], W["conv2.bias"],
                                     padding=1, groups=2))
    t["gap"] = F.adaptive_avg_pool2d(t["conv2"], 1)
    t["flat"] = torch.flatten(t["gap"], 1)
    t["logits"] = linear(t["flat"], W, "logits")
    t["loss"] = F.cross_entropy(t["logits"], I["labels"].long())
    return t


# -- 3. transformer

E, HEADS = 8, 2


def transformer_init(gen):
    W, I = {}, {}
    a = math.sqrt(6 / (E + E))   # Xavier, as nn.MultiheadAttention
    for p in ("wq", "wk", "wv", "wo"):
        W["attn." + p] = uniform(gen, (E, E), a)
    for p in ("bq", "bk", "bv", "bo"):
        W["attn." + p] = uniform(gen, (E,), 0.3)
    norm_init(gen, W, "ln1", (E,))
    linear_init(gen, W, "ff1", E, 16)
    linear_init(gen, W, "ff2", 16, E)
    norm_init(gen, W, "out", (E,))
    I["x"] = normal(gen, (2, 5, E))
    I["target"] = normal(gen, (2, 5, E))
    return W, I


def attention(x, W):
    """nn.MultiheadAttention(E, HEADS, batch_first=True)(x, x, x)[0] with
    pcgc's weights: exactly what the module's forward calls (torch 1.13,
    training / grad path), with in_proj = [wq; wk; wv] transposed."""
    xt = x.transpose(0, 1)   # batch_first -> (L, N, E)
    in_w = torch.cat([W["attn.wq"].t(), W["attn.wk"].t(), W["attn.wv"].t()])
    in_b = torch.cat([W["attn.bq"], W["attn.bk"], W["attn.bv"]])
    y, _ = F.multi_head_attention_forward(
        xt, xt, xt, E, HEADS, in_w, in_b, None, None, False, 0.0,
        W["attn.wo"].t(), W["attn.bo"], training=True, need_weights=False)
    return y.transpose(0, 1)


def transformer_forward(W, I, probe):
    t = {}
    x = I["x"]
    t["attn"] = attention(x, W)
    t["attn_drop"] = F.dropout(t["attn"], p=0.1, training=False).clone()
    t["res1"] = x + t["attn_drop"]
    t["ln1"] = F.layer_norm(t["res1"], (E,), W["ln1.scale"], W["ln1.bias"], eps=1e-5)
    t["ff1"] = linear(t["ln1"], W, "ff1", "gelu")
    t["ff2"] = linear(t["ff1"], W, "ff2")
    t["ff_drop"] = F.dropout(t["ff2"], p=0.1, training=False).clone()
    t["res2"] = t["ln1"] + t["ff_drop"]
    t["out"] = F.layer_norm(t["res2"], (E,), W["out.scale"], W["out.bias"], eps=1e-5)
    t["loss"] = F.mse_loss(t["out"], I["target"])
    return t


def check_attention_module(W, I):
    """The functional attention above equals the module itself."""
    m = torch.nn.MultiheadAttention(E, HEADS, bias=True, batch_first=True).double()
    with torch.no_grad():
        m.in_proj_weight.copy_(torch.cat([W["attn.wq"].t(), W["attn.wk"].t(), W["attn.wv"].t()]))
        m.in_proj_bias.copy_(torch.cat([W["attn.bq"], W["attn.bk"], W["attn.bv"]]))
        m.out_proj.weight.copy_(W["attn.wo"].t())
        m.out_proj.bias.copy_(W["attn.bo"])
    x = I["x"]
    ref = m(x, x, x, need_weights=False)[0]
    # and by hand: softmax(q k^T / sqrt(E / HEADS)) v per head
    q = (x @ W["attn.wq"] + W["attn.bq"]).reshape(2, 5, HEADS, E // HEADS).transpose(1, 2)
    k = (x @ W["attn.wk"] + W["attn.bk"]).reshape(2, 5, HEADS, E // HEADS).transpose(1, 2)
    v = (x @ W["attn.wv"] + W["attn.bv"]).reshape(2, 5, HEADS, E // HEADS).transpose(1, 2)
    p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(E // HEADS), dim=-1)
    hand = (p @ v).transpose(1, 2).reshape(2, 5, E) @ W["attn.wo"] + W["attn.bo"]
    mine = attention(x, W)
    assert torch.allclose(mine, ref, rtol=0, atol=1e-12), (mine - ref).abs().max()
    assert torch.allclose(mine, hand, rtol=0, atol=1e-12), (mine - hand).abs().max()


# -- 6. decoder (LLaMA's layer: RMSNorm, causal attention with RoPE, SwiGLU)

DEC_HEADS, DEC_KV = 4, 2    # grouped-query attention: 2 key/value heads, each for 2 query heads
DEC_F = E // DEC_HEADS * DEC_KV


def decoder_init(gen):
    W, I = {}, {}
    for p in ("wq", "wk", "wv", "wo"):
        cols = DEC_F if p in ("wk", "wv") else E
        W["attn." + p] = uniform(gen, (E, cols), math.sqrt(6 / (E + cols)))
    for n in ("n1", "n2"):
        W[n + ".scale"] = 1 + uniform(gen, (E,), 0.5)   # near 1, not 1
    W["gate.weight"] = uniform(gen, (E, 12), 1 / math.sqrt(E))
    W["up.weight"] = uniform(gen, (E, 12), 1 / math.sqrt(E))
    W["down.weight"] = uniform(gen, (12, E), 1 / math.sqrt(12))
    I["x"] = normal(gen, (2, 5, E))
    I["target"] = normal(gen, (2, 5, E))
    return W, I


def rms_norm(x, scale, eps=1e-5):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * scale


def rope(t, theta=10000.0):
    """Rotary embeddings as Hugging Face's LLaMA applies them (rotate_half):
    t (B, H, S, d); position s rotates the pairs (i, i + d/2) by
    s * theta^(-2i/d), computed in t's dtype."""
    S, d = t.shape[-2], t.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=t.dtype) / d))
    ang = torch.outer(torch.arange(S, dtype=t.dtype), inv)
    emb = torch.cat([ang, ang], dim=-1)
    t1, t2 = t[..., : d // 2], t[..., d // 2:]
    return t * emb.cos() + torch.cat([-t2, t1], dim=-1) * emb.sin()


def causal_attention(x, W):
    """softmax(rope(q) rope(k)^T / sqrt(d) + causal mask) v per head, no
    biases (torch 1.13 has no scaled_dot_product_attention); grouped-query:
    query head i reads key/value head i // (heads / kv_heads), as Hugging
    Face's LLaMA repeats them (repeat_kv)."""
    B, S, _ = x.shape
    d, g = E // DEC_HEADS, DEC_HEADS // DEC_KV
    q = rope((x @ W["attn.wq"]).reshape(B, S, DEC_HEADS, d).transpose(1, 2))
    k = rope((x @ W["attn.wk"]).reshape(B, S, DEC_KV, d).transpose(1, 2)).repeat_interleave(g, dim=1)
    v = (x @ W["attn.wv"]).reshape(B, S, DEC_KV, d).transpose(1, 2).repeat_interleave(g, dim=1)
    s = q @ k.transpose(-1, -2) / math.sqrt(d)
    mask = torch.ones(S, S, dtype=torch.bool).triu(1)   # key j > query i is hidden
    p = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)
    return (p @ v).transpose(1, 2).reshape(B, S, E) @ W["attn.wo"]


def decoder_forward(W, I, probe):
    t = {}
    x = I["x"]
    t["n1"] = rms_norm(x, W["n1.scale"])
    t["attn"] = causal_attention(t["n1"], W)
    t["res1"] = x + t["attn"]
    t["n2"] = rms_norm(t["res1"], W["n2.scale"])
    t["gate"] = t["n2"] @ W["gate.weight"]
    t["up"] = t["n2"] @ W["up.weight"]
    t["act"] = F.silu(t["gate"])
    t["h"] = t["act"] * t["up"]
    t["down"] = t["h"] @ W["down.weight"]
    t["res2"] = t["res1"] + t["down"]
    t["loss"] = F.mse_loss(t["res2"], I["target"])
    return t


# -- 7. moe (a Mixtral-style sparse feed-forward: top-2 routing, SwiGLU experts)

MOE_X, MOE_K, MOE_C, MOE_H, MOE_AUX = 4, 2, 3, 6, 0.1


def moe_init(gen):
    W, I = {}, {}
    W["n1.scale"] = 1 + uniform(gen, (E,), 0.5)
    W["router.weight"] = uniform(gen, (E, MOE_X), 1 / math.sqrt(E))
    W["g.weight"] = uniform(gen, (MOE_X, E, MOE_H), 1 / math.sqrt(E))
    W["u.weight"] = uniform(gen, (MOE_X, E, MOE_H), 1 / math.sqrt(E))
    W["d.weight"] = uniform(gen, (MOE_X, MOE_H, E), 1 / math.sqrt(MOE_H))
    W["d.bias"] = uniform(gen, (MOE_X, E), 1 / math.sqrt(MOE_H))
    I["x"] = normal(gen, (2, 5, E))
    I["target"] = normal(gen, (2, 5, E))
    return W, I


def moe_route(logits, probe):
    """Top-k routing per group (dim 0) as pcgc's moe_route: the gates are the
    softmax of the chosen logits; first choices take their experts' slots
    first, in token order, then second choices; a full expert drops the
    choice (slot -1). Returns gate, slot and the load-balancing loss of
    Switch/Mixtral, X * sum_e (n_e / S) * mean_t softmax(logits)_te, averaged
    over the groups."""
    G, S, X = logits.shape
    top = probe.top_k(logits, MOE_K)
    gate = torch.softmax(top.values, dim=-1)
    slot = torch.full((G, S, MOE_K), -1, dtype=torch.int32)
    for g in range(G):
        fill = [0] * X
        for j in range(MOE_K):
            for t in range(S):
                e = int(top.indices[g, t, j])
                if fill[e] < MOE_C:
                    slot[g, t, j] = e * MOE_C + fill[e]
                    fill[e] += 1
    n = F.one_hot(top.indices, X).sum(dim=2).sum(dim=1).to(logits.dtype)   # [G, X] choices per expert
    p = torch.softmax(logits, dim=-1).mean(dim=1)                         # [G, X]
    aux = (X * (n / S) * p).sum(dim=-1).mean()
    return gate, slot, aux


def moe_forward(W, I, probe):
    t = {}
    x = I["x"]
    G, S, _ = x.shape
    t["n1"] = rms_norm(x, W["n1.scale"])
    t["router"] = t["n1"] @ W["router.weight"]
    t["gate"], t["slot"], aux = moe_route(t["router"], probe)
    # one-hot of each (token, choice)'s slot; dropped choices are all zero
    hot = F.one_hot(t["slot"].clamp(min=0).long(), MOE_X * MOE_C).to(x.dtype)
    hot = hot * (t["slot"] >= 0).to(x.dtype).unsqueeze(-1)                  # [G, S, K, X*C]
    t["xs"] = (hot.sum(dim=2).transpose(1, 2) @ t["n1"]).reshape(G, MOE_X, MOE_C, E)
    t["g"] = torch.einsum("gxcm,xmn->gxcn", t["xs"], W["g.weight"])
    t["u"] = torch.einsum("gxcm,xmn->gxcn", t["xs"], W["u.weight"])
    t["a"] = F.silu(t["g"])
    t["h"] = t["a"] * t["u"]
    t["d"] = torch.einsum("gxcm,xmn->gxcn", t["h"], W["d.weight"]) + W["d.bias"][None, :, None, :]
    combine = (t["gate"].unsqueeze(-1) * hot).sum(dim=2)                    # [G, S, X*C]
    t["y"] = combine @ t["d"].reshape(G, MOE_X * MOE_C, E)
    t["res"] = x + t["y"]
    t["loss"] = F.mse_loss(t["res"], I["target"])
    # what trains and is reported: the loss plus the router's balancing term
    # (pcgc adds the term's gradient in moe_route's backward and its value
    # to the loss it reports)
    t[OBJECTIVE] = t["loss"] + MOE_AUX * aux
    return t


# -- 4. embedding bag

def embbag_init(gen):
    W, I = {}, {}
    W["emb.weight"] = normal(gen, (20, 6))
    linear_init(gen, W, "fc1", 6, 12)
    linear_init(gen, W, "logits", 12, 4)
    ids = torch.randint(0, 20, (8, 5), generator=gen)
    ids[0, :2] = 3   # a repeated id within one bag: its gradient adds up
    I["ids"] = ids
    I["labels"] = torch.randint(0, 4, (8,), generator=gen)
    return W, I


def embbag_forward(mode):
    def forward(W, I, probe):
        t = {}
        t["emb"] = F.embedding_bag(I["ids"].long(), W["emb.weight"], mode=mode)
        t["fc1"] = linear(t["emb"], W, "fc1", "relu", probe)
        t["logits"] = linear(t["fc1"], W, "logits")
        t["loss"] = F.cross_entropy(t["logits"], I["labels"].long())
        return t
    return forward


MODELS = [
    ("mlp", mlp_init, mlp_forward),
    ("cnn", cnn_init, cnn_forward),
    ("transformer", transformer_init, transformer_forward),
    ("embbag", embbag_init, embbag_forward("sum")),
    ("embbag_mean", embbag_init, embbag_forward("mean")),
    ("decoder", decoder_init, decoder_forward),
    ("moe", moe_init, moe_forward),
]


# ------------------------------------------------------------------- runs

# A forward's training objective where it is more than its loss node (moe:
# the loss plus the router's balancing term); written as fwd/loss.
OBJECTIVE = "__objective"


def objective(t):
    return t.get(OBJECTIVE, t["loss"])

def leaves(W, dtype):
    return {k: v.to(dtype).clone().requires_grad_(True) for k, v in W.items()}


def cast_inputs(I, dtype):
    return {k: (v.to(dtype) if v.is_floating_point() else v.to(torch.int32)) for k, v in I.items()}


def run(W0, I0, forward, dtype, probe):
    """All results of one dtype, as an ordered list of (name, tensor)."""
    torch.set_default_dtype(dtype)
    I = cast_inputs(I0, dtype)
    res = [("meta/sgd", torch.tensor([SGD["lr"], SGD["momentum"], SGD["weight_decay"]],
                                     dtype=torch.float64)),
           ("meta/adam", torch.tensor([ADAM["lr"], ADAM["betas"][0], ADAM["betas"][1],
                                       ADAM["eps"], ADAM["weight_decay"]], dtype=torch.float64))]
    res += [("init/" + k, v.to(dtype)) for k, v in W0.items()]
    res += [("input/" + k, v) for k, v in I.items()]

    # forward and backward, gradients of every float tensor
    W = leaves(W0, dtype)
    Ig = {k: (v.clone().requires_grad_(True) if v.is_floating_point() else v) for k, v in I.items()}
    t = forward(W, Ig, probe)
    for v in t.values():
        if v.is_floating_point():
            v.retain_grad()
    obj = objective(t)
    obj.backward()
    t["loss"] = obj  # the reported loss is what trains (moe: with the balancing term, as pcgc reports it)
    t.pop(OBJECTIVE, None)
    res += [("fwd/" + k, v.detach()) for k, v in t.items()]
    res += [("grad/" + k, v.grad) for k, v in W.items()]
    res += [("grad/" + k, v.grad) for k, v in Ig.items() if v.is_floating_point()]
    res += [("grad/" + k, v.grad) for k, v in t.items() if k != "loss" and v.is_floating_point()]

    # optimizers, each from the initial weights, same batch every step
    for tag, make in (("sgd3", lambda p: torch.optim.SGD(p, **SGD)),
                      ("adam3", lambda p: torch.optim.Adam(p, **ADAM))):
        W = leaves(W0, dtype)
        opt = make(list(W.values()))
        losses = []
        for _ in range(STEPS):
            opt.zero_grad()
            t = forward(W, I, probe)
            obj = objective(t)
            obj.backward()
            opt.step()
            losses.append(obj.item())
        res += [(tag + "/" + k, v.detach()) for k, v in W.items()]
        res.append((tag + "/loss", torch.tensor(losses, dtype=dtype)))
    torch.set_default_dtype(torch.float64)
    return res


SCALE_FLOOR = 1e-2


def rel_err(a, b):
    """The test's error measure: max |a - b| / max(max |b|, SCALE_FLOOR), the
    error relative to the tensor's scale. The floor keeps tensors that are
    zero up to rounding (the conv bias before a batch norm, the attention
    key bias: their gradients vanish identically) from comparing noise."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / max(b.abs().max().item(), SCALE_FLOOR)).item()


def main():
    torch.set_num_threads(1)
    only = sys.argv[1:]   # model names to write (default: all)
    for name, init, forward in MODELS:
        if only and name not in only:
            continue
        for seed in range(1000):
            gen = torch.Generator().manual_seed(1000 * (1 + [m[0] for m in MODELS].index(name)) + seed)
            W0, I0 = init(gen)
            probe = Probe()
            r64 = run(W0, I0, forward, torch.float64, probe)
            r32 = run(W0, I0, forward, torch.float32, probe)
            worst = max(rel_err(a[1], b[1]) for a, b in zip(r32, r64) if a[1].is_floating_point())
            if probe.relu_min > KINK_MARGIN and probe.pool_min > KINK_MARGIN and worst < F32_VS_F64_MAX:
                break
        else:
            sys.exit("%s: no seed clears the kink margin" % name)
        if name == "transformer":
            check_attention_module(W0, I0)
        sizes = []
        for dt, res in (("f64", r64), ("f32", r32)):
            path = os.path.join(HERE, "%s.%s.bin" % (name, dt))
            write_bin(path, res)
            back = read_bin(path)
            assert list(back) == [k for k, _ in res]
            for k, v in res:
                assert torch.equal(back[k], v.detach().to(back[k].dtype)), k
            sizes.append("%s %d bytes" % (os.path.basename(path), os.path.getsize(path)))
        print("%-12s seed +%d  loss %.6f  min |relu in| %.2e  min pool gap %.2e  "
              "f32 vs f64 %.1e  (%s)" % (name, seed, r64[[k for k, _ in r64].index("fwd/loss")][1].item(),
                                         probe.relu_min, probe.pool_min, worst, ", ".join(sizes)))


if __name__ == "__main__":
    main()
