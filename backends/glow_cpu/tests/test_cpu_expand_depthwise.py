"""An inverted residual's 1x1 expansion and 3x3 depthwise convolution in one kernel
(``kernels/expand_depthwise.py``): when the pair fuses, when it must not, and that the fused
kernel agrees with onnx's reference evaluator on every path (rows expanded one at a time or
in groups, the whole plane in the ring, stride 1 and 2, chains at the stores or as a pass,
batches, parts of images on several threads) and gives the same bits on any thread count.

The default rule fuses planes at least ``MIN_WIDTH`` (112) wide; ``narrow_planes_fused``
lowers it so the ring's other shapes (groups of rows, a whole plane) run on small inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from glow_cpu.kernels import expand_depthwise
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import max_relative_error


@pytest.fixture
def narrow_planes_fused(monkeypatch):
    monkeypatch.setattr(expand_depthwise, "MIN_WIDTH", 1)


def inverted_residual(
    shape: tuple[int, int, int, int, int, int],
    seed: int,
    *,
    expand_kernel: int = 1,
    dw_pads: int = 1,
    multiplier: int = 1,
    dw_chain: str = "bias_clip",
    second_reader: bool = False,
    relu_first: bool = False,
    project: bool = False,
):
    """x -> Conv 1x1 (+ bias) -> Clip(0, 6) -> depthwise Conv 3x3 (stride) -> ``dw_chain``,
    with ``shape`` = (batch, channels, height, width, expanded channels, stride); its feeds.

    ``dw_chain``: bias_clip (bias, ReLU6), residual (bias, then + a full tensor input),
    row_bias (+ a [1, C, H, 1] tensor: not readable along the output's columns) or none.
    ``second_reader``: the expanded tensor is also an output. ``relu_first``: x goes through
    a Relu first, so the expansion's input is an activation that dies at the expansion.
    ``project``: a 1x1 convolution back to ``channels`` reads the depthwise result (which is
    then an activation too)."""
    n, c, h, w, e, s = shape
    rng = np.random.default_rng(seed)
    pad = expand_kernel // 2
    oh = (h + 2 * dw_pads - 3) // s + 1
    ow = (w + 2 * dw_pads - 3) // s + 1
    out = e * multiplier
    inits = [
        numpy_helper.from_array(
            (rng.standard_normal((e, c, expand_kernel, expand_kernel)) * 0.3).astype(np.float32), "w1"
        ),
        numpy_helper.from_array(rng.standard_normal(e).astype(np.float32), "b1"),
        numpy_helper.from_array((rng.standard_normal((out, 1, 3, 3)) * 0.4).astype(np.float32), "w2"),
        numpy_helper.from_array(rng.standard_normal(out).astype(np.float32), "b2"),
        numpy_helper.from_array(np.array(0.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(6.0, np.float32), "hi"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, h, w])]
    feeds = {"x": rng.standard_normal((n, c, h, w)).astype(np.float32)}
    source = "x"
    nodes = []
    if relu_first:
        nodes.append(helper.make_node("Relu", ["x"], ["xr"]))
        source = "xr"
    nodes += [
        helper.make_node(
            "Conv", [source, "w1", "b1"], ["t0"], kernel_shape=[expand_kernel] * 2, pads=[pad] * 4
        ),
        helper.make_node("Clip", ["t0", "lo", "hi"], ["t"]),
    ]
    dw_inputs = ["t", "w2"] if dw_chain == "none" else ["t", "w2", "b2"]
    nodes.append(
        helper.make_node(
            "Conv", dw_inputs, ["d"], kernel_shape=[3, 3], strides=[s, s], pads=[dw_pads] * 4, group=e
        )
    )
    last = "d"
    if dw_chain == "bias_clip":
        nodes.append(helper.make_node("Clip", ["d", "lo", "hi"], ["y"]))
        last = "y"
    elif dw_chain == "residual":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [n, out, oh, ow]))
        feeds["r"] = rng.standard_normal((n, out, oh, ow)).astype(np.float32)
        nodes.append(helper.make_node("Add", ["d", "r"], ["y"]))
        last = "y"
    elif dw_chain == "row_bias":
        inits.append(numpy_helper.from_array(rng.standard_normal((1, out, oh, 1)).astype(np.float32), "rb"))
        nodes.append(helper.make_node("Add", ["d", "rb"], ["y"]))
        last = "y"
    if project:
        inits.append(
            numpy_helper.from_array((rng.standard_normal((c, out, 1, 1)) * 0.3).astype(np.float32), "w3")
        )
        nodes.append(helper.make_node("Conv", [last, "w3"], ["p"], kernel_shape=[1, 1]))
        last, out = "p", c
    outputs = [helper.make_tensor_value_info(last, TensorProto.FLOAT, [n, out, oh, ow])]
    if second_reader:
        outputs.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [n, e, h, w]))
    graph = helper.make_graph(nodes, "inverted_residual", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, feeds


def run_checked(model, feeds, **options):
    """The compiled model's outputs (checked against the reference evaluator: every element
    written, relative error under 1e-5) and its profile's step names."""
    expected = dict(
        zip([o.name for o in model.graph.output], ReferenceEvaluator(model).run(None, feeds), strict=True)
    )
    compiled = glow_core.compile(
        model, backend="cpu", options={"parallel_work": 0, "profile": True, **options}
    )
    got = compiled.run(feeds)
    for name, value in got.items():
        assert np.isfinite(value).all(), f"{name}: an element was never written (it kept its poison)"
    assert max_relative_error(got, expected) < 1e-5
    return got, [row.name for row in compiled.last_profile]


def fused(names: list[str]) -> bool:
    """Whether a step computes the expansion and the depthwise layer (named after both)."""
    return any(name.count("/convolution") == 2 for name in names)


# (batch, channels, height, width, expanded channels, stride): the default rule's planes
WIDE = [
    (1, 16, 112, 112, 96, 2),  # MobileNetV2's features.2: one row per group, three kept
    (1, 8, 114, 112, 24, 1),  # stride 1, a height that is not the width
    (2, 5, 113, 113, 10, 2),  # odd planes, odd channel counts, a batch
]
# planes the default rule leaves apart, fused under ``narrow_planes_fused``
NARROW = [
    (1, 24, 56, 56, 144, 1),  # two rows per group
    (1, 24, 56, 56, 144, 2),
    (2, 32, 28, 28, 40, 2),  # four rows per group
    (1, 8, 33, 20, 24, 1),  # eleven rows per group (33 = 3 x 11: the first divisor giving 64 columns)
    (3, 6, 7, 9, 16, 2),  # the whole plane in one group
    (1, 4, 1, 17, 8, 1),  # one row: every window reads the zero row above and below
]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("shape", WIDE, ids=["x".join(map(str, s)) for s in WIDE])
def test_wide_planes_fuse_and_match_the_reference(shape, threads):
    model, feeds = inverted_residual(shape, seed=hash(shape) % 1000 + threads)
    _, names = run_checked(model, feeds, threads=threads)
    assert fused(names), names


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape", NARROW, ids=["x".join(map(str, s)) for s in NARROW])
def test_every_ring_shape_matches_the_reference(narrow_planes_fused, shape, threads):
    model, feeds = inverted_residual(shape, seed=hash(shape) % 1000 + 7 * threads)
    _, names = run_checked(model, feeds, threads=threads)
    assert fused(names), names


@pytest.mark.parametrize("dw_chain", ["bias_clip", "residual", "row_bias", "none"])
@pytest.mark.parametrize("stride", [1, 2])
def test_the_depthwise_chain_at_the_stores_or_as_a_pass(narrow_planes_fused, dw_chain, stride):
    model, feeds = inverted_residual((2, 8, 20, 24, 16, stride), seed=11 + stride, dw_chain=dw_chain)
    _, names = run_checked(model, feeds, threads=2)
    assert fused(names), names


def test_results_do_not_depend_on_the_threads(narrow_planes_fused):
    """A row's group is fixed by the plane, so the bits are the same on any cut of the work."""
    model, feeds = inverted_residual((2, 12, 30, 28, 36, 2), seed=5)
    results = [
        run_checked(model, feeds, threads=threads, parts_per_thread=parts)[0]
        for threads, parts in ((1, 1), (2, 1), (3, 1), (2, 3))
    ]
    for other in results[1:]:
        for name, value in other.items():
            np.testing.assert_array_equal(value, results[0][name])


@pytest.mark.parametrize(
    "case",
    [
        {"expand_kernel": 3},  # not a 1x1 expansion
        {"dw_pads": 0},  # the depthwise layer without padding
        {"multiplier": 2},  # two output channels per input channel
        {"second_reader": True},  # the expanded tensor is needed in memory
    ],
    ids=["3x3-expansion", "no-padding", "multiplier-2", "expanded-tensor-read-twice"],
)
def test_other_pairs_stay_apart(narrow_planes_fused, case):
    model, feeds = inverted_residual((1, 8, 16, 20, 16, 1), seed=3, **case)
    _, names = run_checked(model, feeds, threads=2)
    assert not fused(names), names


def test_narrow_planes_and_the_option_keep_the_pair_apart():
    model, feeds = inverted_residual((1, 16, 56, 56, 48, 2), seed=4)
    assert not fused(run_checked(model, feeds, threads=1)[1])  # under MIN_WIDTH
    model, feeds = inverted_residual((1, 16, 112, 112, 48, 2), seed=4)
    assert not fused(run_checked(model, feeds, threads=1, fuse_depthwise=False)[1])


def test_a_destination_over_a_source_drops_the_tail(narrow_planes_fused, monkeypatch):
    """The memory plan is made for the two layers apart, so it may put the depthwise result
    where the expansion's input was (dead once the expansion has run, apart); the fused
    kernel still reads that input while it stores, so such a tail is dropped before any code
    is emitted (``codegen._keep_disjoint_tails``). Checked on the planned IR of a pair with
    the spans the guard reads: every buffer at its own bytes, then the result on the input's."""
    from glow_cpu import backend, codegen
    from glow_cpu.fusion import plan_fusion

    model, _ = inverted_residual((1, 8, 12, 16, 8, 2), seed=9)
    planned = []
    compile_ir = backend.CpuBackend.compile

    def keep_ir(self, ir_fn, options):
        planned.append(ir_fn)
        return compile_ir(self, ir_fn, options)

    monkeypatch.setattr(backend.CpuBackend, "compile", keep_ir)
    glow_core.compile(model, backend="cpu", options={"cache": False, "threads": 1})
    ir_fn = planned[0]
    spans = codegen._Spans(ir_fn.memory_plan)
    fusion = plan_fusion(ir_fn)
    ((producer_id, tail),) = fusion.tails.items()
    codegen._keep_disjoint_tails(ir_fn, fusion, spans)
    assert fusion.tails == {producer_id: tail} and id(tail) in fusion.skipped

    producer = next(i for i in ir_fn.instrs if id(i) == producer_id)
    source = spans.span(producer.sources[0])
    result = fusion.final_dest.get(id(tail), tail.dest)
    spans[id(result)] = source  # the result planned over the expansion's input
    fusion = plan_fusion(ir_fn)
    codegen._keep_disjoint_tails(ir_fn, fusion, spans)
    assert not fusion.tails and id(tail) not in fusion.skipped  # the depthwise layer runs apart
