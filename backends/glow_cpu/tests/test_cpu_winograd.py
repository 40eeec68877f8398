"""Winograd convolution (``kernels/winograd.py``, ``winograd_transforms.py``): each variant
forced on odd sizes, pads, channel counts that are not multiples of 8 or 16, batches,
1 and 2 threads and fused epilogues, checked against a float64 numpy convolution within the
conformance suite's float32 tolerance, with every output element written (the runtime
poisons outputs with NaN before each run); the selection rule, the accuracy fallback and
the option that turns Winograd off.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cpu_cases import conv_model
from glow_conformance.compare import TOLERANCE
from glow_cpu import registers, winograd_transforms
from glow_cpu.jit import host_target
from glow_cpu.kernels import winograd
from glow_cpu.kernels.conv import Geometry
from glow_cpu.registers import register_file
from onnx import numpy_helper

import glow_core
from glow_core.accuracy import max_relative_error
from glow_core.types import ElemKind

# (batch, channels, height, width, out channels, pad)
SHAPES = [
    (1, 16, 8, 8, 16, 1),  # whole tiles, one channel block
    (2, 21, 11, 13, 19, 1),  # odd sizes, partial channel blocks in and out, a batch
    (1, 7, 9, 10, 5, 0),  # no padding, fewer channels than a vector
    (1, 33, 17, 19, 40, 1),  # a partial last tile in both directions
    (3, 16, 14, 14, 16, 2),  # pad 2: output larger than the input
    (1, 64, 6, 30, 48, 1),  # wide rows: several 16-column runs of tiles
    (2, 12, 3, 3, 8, 1),  # a plane smaller than one F(4x4) tile
]
EPILOGUES = ["none", "bias_relu", "bias_residual_relu"]


def _reference(model, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """The model (Conv, then bias/residual/ReLU) in float64 numpy, tap by tap."""
    weights = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    conv = model.graph.node[0]
    pad = next(a.ints[0] for a in conv.attribute if a.name == "pads")
    x = np.pad(np.asarray(feeds["x"], np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    w = weights["w"]
    oh, ow = x.shape[2] - 2, x.shape[3] - 2
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", x[:, :, i : i + oh, j : j + ow], w[:, :, i, j])
    if "b" in conv.input:
        y += weights["b"][None, :, None, None]
    if "r" in feeds:
        y += feeds["r"]
    if len(model.graph.node) > 1:
        y = np.maximum(y, 0.0)
    return y


def _compile_forced(model, monkeypatch, m: int, threads: int):
    """Compile with F(m x m) forced on (the rule and accuracy check bypassed); returns the
    function and the variants the emitter ran."""
    monkeypatch.setattr(winograd, "preferred", lambda g, parts=1, accumulators=24: (m,))
    monkeypatch.setattr(winograd, "accurate_enough", lambda m, cin: True)
    ran: list[str] = []
    emit = winograd.emit_winograd
    monkeypatch.setattr(winograd, "emit_winograd", lambda k, g, v: (ran.append(v.name), emit(k, g, v)))
    options = {"threads": threads, "parallel_work": 0, "cache": False}
    return glow_core.compile(model, backend="cpu", options=options), ran


def _run_case(shape, epilogue, m, threads, monkeypatch) -> None:
    n, c, h, w, cout, pad = shape
    seed = (sum(shape) * 7919 + m * 131 + len(epilogue) * 31 + threads) % (1 << 31)
    model, feeds, output = conv_model((n, c, h, w, cout, 3, 1, pad, 1), epilogue, seed)
    compiled, ran = _compile_forced(model, monkeypatch, m, threads)
    assert ran == [winograd_transforms.VARIANTS[m].name]
    got = compiled.run(feeds)[output]
    assert np.isfinite(got).all(), "an output element was never written (it kept its poison)"
    error = max_relative_error({output: got}, {output: _reference(model, feeds)})
    assert error <= TOLERANCE[ElemKind.float32], f"F({m}x{m}) {shape}: relative error {error:.3g}"


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("index", range(len(SHAPES)), ids=["x".join(map(str, s)) for s in SHAPES])
def test_variant_matches_float64(index, m, monkeypatch):
    """Every shape on every variant; the epilogue and thread count rotate over the shapes."""
    _run_case(SHAPES[index], EPILOGUES[index % 3], m, 1 + index % 2, monkeypatch)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_epilogues_and_threads(epilogue, threads, monkeypatch):
    _run_case((2, 24, 10, 12, 20, 1), epilogue, 4, threads, monkeypatch)
    _run_case((1, 24, 10, 12, 20, 1), epilogue, 2, threads, monkeypatch)


@pytest.mark.parametrize("private_f2", [True, False], ids=["f2-private", "f2-shared"])
@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape", [(1, 24, 10, 12, 40, 1), (1, 32, 7, 7, 96, 1)], ids=["cout40", "cout96"])
def test_output_channels_split_among_threads(shape, m, threads, private_f2, monkeypatch):
    """One image with too few rows of tiles for every thread: the threads split the output
    channels (each reads its share of the filter), the last part narrower where the
    channels do not divide (40 on 3 threads: 16 + 16 + 8). F(4x4) parts share one input
    transform; F(2x2) parts each transform the input themselves unless told to share."""
    monkeypatch.setattr(winograd, "PRIVATE_F2_INPUT", private_f2)
    plans: list[winograd.Plan] = []
    make_plan = winograd.plan
    monkeypatch.setattr(winograd, "plan", lambda *a, **kw: plans.append(make_plan(*a, **kw)) or plans[-1])
    _run_case(shape, "bias_residual_relu", m, threads, monkeypatch)
    (used,) = plans
    assert used.cout_parts > 1 and used.chunks == 1, used
    assert used.part_cols % used.nr == 0 and (used.cout_parts - 1) * used.part_cols < shape[4]
    assert winograd.shares_input(used, winograd_transforms.VARIANTS[m]) == (m == 4 or not private_f2)


def test_few_units_are_shared_evenly():
    """3 units of rows on 2 threads would leave one thread idle a third of the time: the rows
    are cut into a multiple of the parts instead (256 channels on 56x56: 3 -> 4 units)."""
    variant = winograd_transforms.VARIANTS[4]
    one = winograd.plan(_geometry(256, 56, 256), variant, 1)
    two = winograd.plan(_geometry(256, 56, 256), variant, 2)
    assert (one.chunks, one.cout_parts) == (3, 1)
    assert two.chunks % 2 == 0 and two.cout_parts == 1


@pytest.mark.parametrize(("threads", "rows", "chunks"), [(1, 2, 7), (2, 1, 14)])
def test_small_filters_compute_no_rows_past_the_image(threads, rows, chunks):
    """With a small filter (``SMALL_FILTER``) the units' rows of tiles divide the plane's where
    they can (64 channels on 56x56: 14 rows as 7 units of 2, not 3 units of 5 with a 15th row
    past the image; on 2 threads 14 units of 1, 7 rows each, where 7 units of 2 gave one
    thread 8); a large one keeps the largest units ``UNIT_TILES`` allows."""
    variant = winograd_transforms.VARIANTS[4]
    small = winograd.plan(_geometry(64, 56, 64), variant, threads)
    assert (small.rows, small.chunks, small.tiles_y) == (rows, chunks, 14)
    large = winograd.plan(_geometry(256, 56, 256), variant, threads)
    assert large.rows * large.chunks > large.tiles_y and large.rows >= 4
    odd = winograd.plan(_geometry(96, 35, 96), variant, 1)  # 9 rows of tiles
    assert (odd.rows, odd.chunks, odd.tiles_y) == (3, 3, 9)


@pytest.mark.parametrize(
    ("c", "size", "threads", "rows", "chunks"),
    [(96, 35, 2, 5, 2), (64, 56, 3, 5, 3), (96, 35, 3, 3, 3), (64, 56, 2, 1, 14)],
)
def test_a_few_small_filter_units_load_the_busiest_part_least(c, size, threads, rows, chunks):
    """With fewer than four units a part, a small filter's rows per unit are those that give
    the busiest part the fewest rows to compute: 9 rows on 2 threads as 2 units of 5 (3
    units of 3 would give one part 6; 9 units of 1 give it 5 too, a tie: the larger units
    stay), 14 rows on 3 threads as 3 units of 5 (7 of 2: 6; 14 of 1: 5, a tie), 14 rows on 2
    threads as 14 units of 1 (7 rows each; 7 units of 2 gave one 8): units under a quarter
    of ``UNIT_TILES`` only where they load the busiest part strictly less."""
    variant = winograd_transforms.VARIANTS[4]
    p = winograd.plan(_geometry(c, size, c), variant, threads)
    assert (p.rows, p.chunks, p.cout_parts) == (rows, chunks, 1)
    busiest = -(-p.chunks // threads) * p.rows
    for other in range(1, p.tiles_y + 1):  # no other unit size loads it less
        units = -(-p.tiles_y // other)
        assert busiest <= -(-units // threads) * other


@pytest.mark.parametrize(
    ("shape", "m", "threads", "images", "cout_parts"),
    [
        ((8, 32, 7, 7, 24, 1), 2, 2, 4, 1),  # ResNet-50's 7x7 at batch 8: 16 tiles an image, 4 a unit
        ((6, 20, 12, 12, 36, 1), 4, 1, 6, 1),  # 9 tiles an image: the whole batch a unit
        ((6, 20, 12, 12, 36, 1), 4, 2, 6, 2),  # the same on 2 threads: the parts split its channels
        ((4, 16, 9, 9, 16, 1), 2, 1, 2, 1),  # 25 tiles an image: 2 a unit (4 would pass UNIT_TILES)
        ((3, 16, 6, 6, 16, 1), 4, 2, 1, 1),  # 3 images on 2 threads, 16 channels: no grouping
        ((3, 16, 6, 6, 96, 1), 2, 3, 3, 3),  # 96 channels on 3 threads: 32 each (a panel on AVX-512)
    ],
    ids=["7x7b8t2", "12x12b6t1", "12x12b6t2", "9x9b4t1", "6x6b3t2", "6x6b3t3"],
)
def test_units_take_several_images_of_small_planes(shape, m, threads, images, cout_parts, monkeypatch):
    """Where an image has few tiles a unit takes several whole images (``Plan.images``): the
    most that divide the batch within ``UNIT_TILES`` tiles with as many units a part; on
    several threads a batch that fits one unit is one unit whose output channels the parts
    split (``BATCH_SPLIT_BY_CHANNELS``). Each image's output (and its residual, read per
    image) is checked against float64."""
    plans: list[winograd.Plan] = []
    make_plan = winograd.plan
    monkeypatch.setattr(winograd, "plan", lambda *a, **kw: plans.append(make_plan(*a, **kw)) or plans[-1])
    _run_case(shape, "bias_residual_relu", m, threads, monkeypatch)
    (used,) = plans
    assert (used.images, used.cout_parts) == (images, cout_parts), used
    assert used.tiles <= winograd.UNIT_TILES or used.images == 1
    assert used.all_units(shape[0]) % threads == 0 or used.images == 1


def _geometry(c: int, size: int, cout: int, k: int = 3, stride: int = 1, group: int = 1, dilation: int = 1):
    out = (size + 2 - dilation * (k - 1) - 1) // stride + 1
    return Geometry(
        1, c, size, size, cout, k, k, out, out, stride, stride, (1,) * 4, dilation, dilation, group
    )


def test_selection_rule():
    """F(4x4) on large planes with at least 64 channels where it stays accurate, F(2x2) on
    the rest with 32+ channels, direct for small channel counts and every non-3x3,
    strided, dilated or grouped layer and for runtime filters."""
    f4_ok = winograd_transforms.accurate_enough(4, 64)
    assert winograd.choose(_geometry(64, 56, 64), True).m == (4 if f4_ok else 2)
    assert winograd.choose(_geometry(16, 56, 16), True) is None
    assert winograd.choose(_geometry(3, 224, 64), True) is None
    assert winograd.choose(_geometry(64, 56, 64, stride=2), True) is None
    assert winograd.choose(_geometry(64, 56, 64, group=2), True) is None
    assert winograd.choose(_geometry(64, 56, 64, dilation=2), True) is None
    assert winograd.choose(_geometry(64, 56, 64, k=1), True) is None
    assert winograd.choose(_geometry(64, 56, 64), False) is None
    with winograd.enabled(False):
        assert winograd.choose(_geometry(64, 56, 64), True) is None


def _choices(geometry, batches, parts, accumulators):
    """The variant (0: direct) ``geometry`` takes at each of ``batches``."""
    chosen = [winograd.choose(dataclasses.replace(geometry, n=n), True, parts, accumulators) for n in batches]
    return [0 if variant is None else variant.m for variant in chosen]


@pytest.mark.parametrize("parts", [1, 2])
def test_an_eight_lane_target_takes_winograd_on_small_planes(parts):
    """On AVX2 a 7x7 plane takes F(2x2) at batch 1 and F(4x4) where a unit of whole images
    gathers 16 F(4x4) tiles (at 2 threads one unit whose channels the parts split); 14x14
    takes F(4x4); 8x8 with Inception-v3's channels F(2x2)."""
    avx2 = registers.AVX2.accumulators
    f4 = 4 if winograd_transforms.accurate_enough(4, 512) else 2  # its estimate is near the bound
    assert _choices(_geometry(512, 7, 512), (1, 2, 4, 8), parts, avx2) == [2, 2, f4, f4]
    assert _choices(_geometry(256, 14, 256), (1, 8), parts, avx2) == [4, 4]
    assert _choices(_geometry(448, 8, 384), (1,), parts, avx2) == [2]


@pytest.mark.parametrize("parts", [1, 2])
def test_a_sixteen_lane_target_takes_the_variant_estimated_cheapest(parts):
    """On AVX-512 a variant is taken where its estimate (``relative_cost``: the longer of
    streaming its transformed filter and its products, per unit) beats the direct kernel,
    the cheapest first: ResNet-50's 7x7 layers stay direct at batch 1 (a unit of 16 F(2x2)
    tiles streams 16.8 MB) and take F(2x2) at batches 2 and 4, F(4x4) at 8 (one unit of 32
    tiles); Inception-v3's 8x8 layers take F(2x2); the 14x14 layers F(2x2) at batch 1 (F(4x4)
    streams 2.25x the bytes for a third of the tiles) and F(4x4) at batch 8; small filters
    are compute-bound and keep F(4x4)."""
    avx512 = registers.AVX512.accumulators
    f4 = 4 if winograd_transforms.accurate_enough(4, 512) else 2  # its estimate is near the bound
    assert _choices(_geometry(512, 7, 512), (1, 2, 4, 8), parts, avx512) == [0, 2, 2, f4]
    assert _choices(_geometry(448, 8, 384), (1, 2), parts, avx512) == [2, 2]
    assert _choices(_geometry(256, 14, 256), (1, 8), parts, avx512) == [2, 4]
    assert _choices(_geometry(128, 28, 128), (1,), parts, avx512) == [4]
    assert _choices(_geometry(64, 56, 64), (1,), parts, avx512) == [4]
    assert _choices(_geometry(64, 7, 64), (1,), parts, avx512) == [2]
    seven = _geometry(512, 7, 512)
    assert winograd.relative_cost(seven, winograd.VARIANTS[2], parts) > 1.0
    fourteen = _geometry(256, 14, 256)
    costs = [winograd.relative_cost(fourteen, winograd.VARIANTS[m], parts) for m in (2, 4)]
    assert costs[0] < costs[1] < 1.0


def test_accuracy_estimate_and_fallback(monkeypatch):
    """The estimate grows with the tile and the channels, is within the tolerance for
    F(2x2); with a tolerance no variant meets, layers fall back to direct convolution."""
    tolerance = TOLERANCE[ElemKind.float32]
    assert winograd_transforms.float32_tolerance() == tolerance
    assert winograd_transforms.estimated_error(2, 512) < winograd_transforms.estimated_error(4, 512)
    assert winograd_transforms.estimated_error(2, 512) < tolerance / 4
    assert winograd_transforms.estimated_error(4, 16) < winograd_transforms.estimated_error(4, 512)
    monkeypatch.setattr(winograd_transforms, "float32_tolerance", lambda: 1e-9)
    assert winograd.choose(_geometry(64, 56, 64), True) is None


def test_simulation_matches_the_reference():
    """The float32 simulation the accuracy rule runs is the Winograd algorithm (so its
    error is rounding, not a wrong transform)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 10, 10)).astype(np.float32)
    f = rng.standard_normal((3, 5, 3, 3)).astype(np.float32)
    want = winograd_transforms.direct_conv_float64(x, f)
    for variant in winograd_transforms.VARIANTS.values():
        got = winograd_transforms.winograd_conv_float32(x, f, variant)
        assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1e-5, variant.name


@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("chunk_bytes", [None, 1])
def test_packed_filter_is_the_transform_in_panels(m, chunk_bytes, monkeypatch):
    """The packer's layout: position-major, then GEMM B panels of ``nr`` columns (output
    channels) over the zero-padded input channels; its size as the size function says;
    every element the float64 transform rounded once (within an ulp: the packer sums the
    nine taps in another order than einsum), written into a poisoned buffer, whether the
    panels are transformed together or one chunk at a time (``chunk_bytes`` 1)."""
    if chunk_bytes is not None:
        monkeypatch.setattr(winograd_transforms, "_CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(m)
    filt = rng.standard_normal((20, 7, 3, 3)).astype(np.float32)
    nr, cin_padded = 16, 16
    size = winograd_transforms.winograd_filter_size(filt.shape, m, nr, cin_padded)
    assert winograd_transforms.winograd_filter(filt, m=m, nr=nr, cin_padded=cin_padded).size == size
    packed = np.full(size, np.nan, np.float32)
    winograd_transforms.winograd_filter_into(filt, packed, m, nr, cin_padded)
    variant = winograd_transforms.VARIANTS[m]
    u = winograd_transforms.transformed_filter(filt, variant)  # [a, b, Cout, Cin], float64
    want = np.zeros((variant.alpha, variant.alpha, 2 * nr, cin_padded))
    want[:, :, :20, :7] = u
    want = want.reshape(variant.alpha, variant.alpha, 2, nr, cin_padded).transpose(0, 1, 2, 4, 3)
    panels = packed.reshape(variant.alpha, variant.alpha, 2, cin_padded, nr)
    assert not np.isnan(panels).any()
    assert np.all(np.abs(panels - want) <= np.spacing(np.abs(want).astype(np.float32)))
    assert not panels[:, :, :, 7:, :].any() and not panels[:, :, 1, :, 4:].any()


def test_option_turns_winograd_off(monkeypatch):
    model, feeds, output = conv_model((1, 64, 16, 16, 64, 3, 1, 1, 1), "bias_relu", 11)
    ran: list[str] = []
    emit = winograd.emit_winograd
    monkeypatch.setattr(winograd, "emit_winograd", lambda k, g, v: (ran.append(v.name), emit(k, g, v)))
    results = {}
    for on in (True, False):
        options = {"threads": 1, "cache": False, "winograd": on}
        results[on] = glow_core.compile(model, backend="cpu", options=options).run(feeds)[output]
    assert len(ran) == 1, "Winograd ran with the option off, or not with it on"
    for got in results.values():
        assert (
            max_relative_error({output: got}, {output: _reference(model, feeds)})
            <= TOLERANCE[ElemKind.float32]
        )


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "vgg19"])
def test_model_with_winograd_matches_onnxruntime(name, monkeypatch):
    """Whole models with Winograd on (the default) stay within 1e-4 of onnxruntime, and
    their 3x3 stride-1 layers do take it: one kernel is emitted per distinct layer shape
    (layers of one shape share it), ResNet-50 has 4 such shapes (64@56, 128@28, 256@14,
    512@7; on AVX-512 the 512@7 layers at batch 1 stay direct, ``winograd.relative_cost``) and
    VGG-19 8 with 32 or more input channels (its first layer has 3)."""
    from glow_core.accuracy import onnxruntime_outputs
    from glow_core.model_zoo import MODELS, random_inputs

    ran: list[str] = []
    emit = winograd.emit_winograd
    monkeypatch.setattr(winograd, "emit_winograd", lambda k, g, v: (ran.append(v.name), emit(k, g, v)))
    model = MODELS[name]()
    inputs = random_inputs(model, seed=0)
    compiled = glow_core.compile(model, backend="cpu", options={"threads": 2, "cache": False})
    error = max_relative_error(compiled.run(inputs), onnxruntime_outputs(model, inputs))
    assert error < 1e-4, f"{name}: relative error {error:.3g} against onnxruntime"
    host = host_target()
    sixteen_lanes = register_file(host.triple, host.features, host.cpu) == registers.AVX512
    assert len(ran) == {"resnet50": 3 if sixteen_lanes else 4, "vgg19": 8}[name], ran


def test_repeated_winograd_layers_share_one_kernel_and_keep_their_own_filters(rng):
    """Three 64-channel 3x3 layers of one shape, other weights: one Winograd kernel, emitted
    once (``check_sharing`` proves each layer alone would get the same code), each layer
    reading its own transformed filter block; results agree with float64 layer by layer."""
    from glow_cpu.backend import CpuBackend, CpuOptions
    from glow_cpu.codegen import build_program

    from glow_core.graph import Module
    from glow_core.runtime.pipeline import compile_stages

    m = Module()
    b = m.create_function().builder()
    x = b.placeholder("x", (1, 64, 16, 16))
    filters = [(rng.standard_normal((64, 64, 3, 3)) * np.sqrt(2 / 576)).astype(np.float32) for _ in range(3)]
    y = x
    for i, w in enumerate(filters):
        y = b.relu(
            b.conv(
                y, b.constant(w, f"w{i}"), b.constant(np.zeros(64, np.float32), f"b{i}"), pads=(1, 1, 1, 1)
            )
        )
    b.save(y, "y")
    emitted: list[int] = []
    real = winograd.emit_winograd

    def spy(k, g, variant):
        emitted.append(variant)
        real(k, g, variant)

    import glow_cpu.kernels.conv as conv_module

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_module.winograd, "emit_winograd", spy)
        program = build_program(compile_stages(m, CpuBackend()).ir, 1, False, 0, check_sharing=True)
    assert len(emitted) >= 2 and len(set(emitted)) == 1  # the shared kernel, and check_sharing's re-emission
    assert [kind for _, kind in program.steps].count("Convolution+Add+Max") == 3
    assert program.kernels == 1
    feed = rng.standard_normal((1, 64, 16, 16)).astype(np.float32)
    got = glow_core.compile(m, backend=CpuBackend(), options=CpuOptions(cache=False)).run({"x": feed})["y"]
    want = feed.astype(np.float64)
    for w in filters:
        padded = np.pad(want, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros_like(want)
        for i in range(3):
            for j in range(3):
                out += np.einsum(
                    "nchw,oc->nohw", padded[:, :, i : i + 16, j : j + 16], w[:, :, i, j].astype(np.float64)
                )
        want = np.maximum(out, 0.0)
    assert max_relative_error({"y": got}, {"y": want.astype(np.float32)}) <= TOLERANCE[ElemKind.float32] * 10
