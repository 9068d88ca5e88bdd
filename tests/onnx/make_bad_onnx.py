#!/usr/bin/python3
"""make_bad_onnx.py -- the malformed ONNX files of tests/data/bad-onnx.

    /usr/bin/python3 tests/onnx/make_bad_onnx.py [OUTDIR]   # default tests/data/bad-onnx

Needs only the onnx package (python3-onnx), not torch. Every file is built
here from scratch with onnx.helper (or from bytes), deterministically, so
rerunning the script rewrites the same files; the outputs are committed
and tests/onnx/test_onnx.c loads each NAME.onnx with pcgc_onnx_load and
checks the error against NAME.expect.

NAME.expect is text, one "key: value" per line:

    status: unsupported        pcgc_status_str() of the expected status
    message: Einsum            a substring of the error message (any number)
    hint: Conv                 a substring of the hint (any number)

Lines that are empty or start with '#' are comments. Substrings are
case-sensitive.

The base model of most files is a one-layer MLP in the shape torch.onnx.export
writes: input x f32[batch, 4], Gemm(x, W f32[3, 4], b f32[3], transB=1),
output y f32[batch, 3], opset 14, IR version 8.
"""

import os
import random
import sys

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "..", "data", "bad-onnx")
OPSET = 14


def tensor(name, dims, seed=0, dtype=TensorProto.FLOAT):
    n = 1
    for d in dims:
        n *= d
    rng = random.Random(seed)
    vals = [round(rng.uniform(-1, 1), 3) for _ in range(n)]
    return helper.make_tensor(name, dtype, dims, vals)


def model(nodes, inputs, outputs, inits=(), opset=OPSET, name="bad"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, producer_name="pcgc make_bad_onnx.py",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def base_mlp():
    """x[batch,4] -> Gemm(transB=1) -> y[batch,3]"""
    return model([helper.make_node("Gemm", ["x", "W", "b"], ["y"], name="fc", transB=1)],
                 [vi("x", ["batch", 4])], [vi("y", ["batch", 3])],
                 [tensor("W", [3, 4], 1), tensor("b", [3], 2)])


def conv_model(**attrs):
    """x[batch,1,6,6] -> Conv(W[2,1,3,3]) -> y"""
    return model([helper.make_node("Conv", ["x", "W"], ["y"], name="conv0", kernel_shape=[3, 3], **attrs)],
                 [vi("x", ["batch", 1, 6, 6])], [vi("y", ["batch", 2, 5, 5])],
                 [tensor("W", [2, 1, 3, 3], 3)])


def external(location, offset=None, length=None):
    """base_mlp with W stored as external data at `location`."""
    m = base_mlp()
    w = m.graph.initializer[0]
    w.ClearField("float_data")
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = w.external_data.add()
            e.key, e.value = k, str(v)
    return m


def cases():
    """Yields (name, bytes, expect lines)."""
    mlp = base_mlp().SerializeToString()

    yield "empty", b"", ["status: syntax error", "message: not a valid ONNX model", "hint: empty"]

    rng = random.Random(7)
    # 0x0a starts field 1 (ir_version) as a length-delimited field: a wire-type error
    junk = bytes([0x0a, 0xff]) + bytes(rng.randrange(256) for _ in range(254))
    yield "random-bytes", junk, ["status: syntax error", "message: not a valid ONNX model"]

    yield "text-file", b"input x: f32[8, 16]\nh = linear(x, out=4)\n", \
        ["status: syntax error", "message: not a valid ONNX model"]

    # Truncations: every cut falls inside a length-delimited field, so the
    # protobuf decoder must notice.
    for cut in (3, len(mlp) // 4, len(mlp) // 2, len(mlp) - 1):
        part = mlp[:cut]
        try:
            onnx.load_model_from_string(part)
            sys.exit(f"truncation at {cut} of {len(mlp)} still parses; pick another")
        except Exception:
            pass
        yield f"truncated-{cut}", part, ["status: syntax error", "message: not a valid ONNX model"]

    m = model([], [vi("x", ["batch", 4])], [vi("x", ["batch", 4])])
    m.ClearField("graph")
    yield "no-graph", m.SerializeToString(), ["status: syntax error", "message: no graph"]

    m = base_mlp()
    m.graph.node.append(helper.make_node("Einsum", ["y", "y"], ["z"], name="mix", equation="bi,bi->b"))
    m.graph.output[0].CopyFrom(vi("z", ["batch"]))
    yield "unsupported-op-einsum", m.SerializeToString(), [
        "status: unsupported", "message: 'mix'", "message: Einsum", "message: opset 14",
        "hint: Gemm", "hint: Conv", "hint: MatMul"]

    m = model([helper.make_node("LSTM", ["x", "W", "R"], ["", "h"], name="rnn", hidden_size=2)],
              [vi("x", [5, "batch", 3])], [vi("h", [1, "batch", 2])],
              [tensor("W", [1, 8, 3], 4), tensor("R", [1, 8, 2], 5)])
    yield "unsupported-op-lstm", m.SerializeToString(), [
        "status: unsupported", "message: 'rnn'", "message: LSTM", "message: opset 14", "hint: Relu"]

    yield "conv-asymmetric-pads", conv_model(pads=[0, 0, 1, 1]).SerializeToString(), [
        "status: unsupported", "message: 'conv0'", "message: pads"]

    m = base_mlp()
    m.graph.node[0].attribute.append(helper.make_attribute("transA", 1))
    yield "gemm-transA", m.SerializeToString(), ["status: unsupported", "message: 'fc'", "message: transA"]

    m = base_mlp()
    w = m.graph.initializer[0]
    w.ClearField("float_data")
    w.raw_data = b"\0" * (4 * 12 - 4)   # 11 floats for a [3, 4] tensor
    yield "initializer-wrong-length", m.SerializeToString(), [
        "status: invalid argument", "message: 'W'", "message: 12 elements"]

    m = base_mlp()
    del m.graph.initializer[0].float_data[5:]   # 5 of 12 floats
    yield "initializer-float-data-short", m.SerializeToString(), [
        "status: invalid argument", "message: 'W'", "message: 12 elements"]

    yield "external-outside", external("../outside.bin").SerializeToString(), [
        "status: invalid argument", "message: 'W'", "message: ../outside.bin", "message: leaves the model's folder",
        "hint: relative"]

    yield "external-absolute", external("/etc/passwd").SerializeToString(), [
        "status: invalid argument", "message: 'W'", "message: /etc/passwd",
        "message: leaves the model's folder"]

    yield "external-missing", external("missing-weights.bin").SerializeToString(), [
        "status: I/O error", "message: 'W'", "message: missing-weights.bin"]

    # external-data.bin (written below) holds 16 bytes: W [3, 4] needs 48
    yield "external-short", external("external-data.bin").SerializeToString(), [
        "status: I/O error", "message: 'W'", "message: external-data.bin", "message: ends before"]

    yield "external-length-mismatch", external("external-data.bin", offset=0, length=16).SerializeToString(), [
        "status: invalid argument", "message: 'W'", "message: length 16"]

    m = base_mlp()
    m.graph.input[0].CopyFrom(vi("x", ["batch", 4], TensorProto.STRING))
    yield "input-string", m.SerializeToString(), ["status: unsupported", "message: 'x'", "message: STRING",
                                               "hint: FLOAT"]

    m = base_mlp()
    m.graph.initializer[1].data_type = TensorProto.COMPLEX64
    yield "initializer-complex", m.SerializeToString(), ["status: unsupported", "message: 'b'", "message: COMPLEX64"]

    m = base_mlp()
    m.graph.node[0].input[1] = "W_missing"
    yield "dangling-input", m.SerializeToString(), [
        "status: malformed graph", "message: 'fc'", "message: 'W_missing'"]

    m = base_mlp()
    del m.opset_import[:]
    yield "no-opset", m.SerializeToString(), ["status: unsupported", "message: opset"]

    m = base_mlp()
    m.graph.node.append(helper.make_node("FusedGemm", ["y", "W", "b"], ["z"], name="ms", domain="com.microsoft"))
    m.graph.output[0].CopyFrom(vi("z", ["batch", 3]))
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    yield "unsupported-domain", m.SerializeToString(), [
        "status: unsupported", "message: 'ms'", "message: FusedGemm", "message: com.microsoft"]

    # Reshape to a shape that is a graph input: not known at import time
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape0")],
              [vi("x", ["batch", 4]), vi("s", [2], TensorProto.INT64)], [vi("y", ["batch", 4])])
    yield "reshape-dynamic-shape", m.SerializeToString(), ["status: unsupported", "message: 'reshape0'"]

    # If nodes nested 100 deep (then_branch in then_branch ...): the
    # protobuf decoder recurses once per level, so the importer refuses
    # deep nesting before decoding
    leaf = helper.make_graph([], "leaf", [], [vi("x", ["batch", 4])])
    inner = leaf
    for k in range(100):
        node = helper.make_node("If", ["c"], ["x"], name=f"if{k}", then_branch=inner, else_branch=leaf)
        inner = helper.make_graph([node], f"g{k}", [], [vi("x", ["batch", 4])])
    m = model(list(inner.node), [vi("c", [], TensorProto.BOOL)], [vi("x", ["batch", 4])])
    yield "nested-too-deep", m.SerializeToString(), ["status: syntax error", "message: nested more than"]

    # Where with a constant condition that is not a causal mask
    m = model([helper.make_node("Where", ["c", "x", "ninf"], ["y"], name="pick")],
              [vi("x", ["batch", 3, 3])], [vi("y", ["batch", 3, 3])],
              [helper.make_tensor("c", TensorProto.BOOL, [3, 3], [1, 1, 0, 0, 1, 1, 1, 0, 1]),
               helper.make_tensor("ninf", TensorProto.FLOAT, [], [float("-inf")])])
    yield "where-not-causal", m.SerializeToString(), [
        "status: unsupported", "message: 'pick'", "message: not a causal mask", "hint: masked_fill"]

    # Clip whose bound is computed at run time
    m = model([helper.make_node("Clip", ["x", "lo"], ["y"], name="clamp")],
              [vi("x", ["batch", 4]), vi("lo", [])], [vi("y", ["batch", 4])])
    yield "clip-runtime-bound", m.SerializeToString(), [
        "status: unsupported", "message: 'clamp'", "message: min bound must be a one-element constant",
        "hint: attributes"]

    # Expand to more copies than a concat takes
    m = model([helper.make_node("Expand", ["x", "s"], ["y"], name="grow")],
              [vi("x", ["batch", 1])], [vi("y", ["batch", 100])],
              [helper.make_tensor("s", TensorProto.INT64, [2], [1, 100])])
    yield "expand-too-many", m.SerializeToString(), [
        "status: unsupported", "message: 'grow'", "message: 100 copies", "hint: broadcasts"]

    m = base_mlp()
    m.graph.node.append(helper.make_node("Relu", ["y"], ["y"], name="again"))
    yield "duplicate-output", m.SerializeToString(), ["status: malformed graph", "message: 'again'",
                                                   "message: 'y' is defined twice"]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_OUT
    os.makedirs(out, exist_ok=True)
    n = 0
    for name, data, expect in cases():
        with open(os.path.join(out, name + ".onnx"), "wb") as f:
            f.write(data)
        with open(os.path.join(out, name + ".expect"), "w") as f:
            f.write("\n".join(expect) + "\n")
        n += 1
    with open(os.path.join(out, "external-data.bin"), "wb") as f:
        f.write(bytes(range(16)))
    print(f"wrote {n} malformed models to {os.path.normpath(out)}")


if __name__ == "__main__":
    main()
