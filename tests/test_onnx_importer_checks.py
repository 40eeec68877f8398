"""The importers' shared checks (input ranks, per-dim attribute lists, axes, element types)
and the fixes the fuzzer asked for (issue 22): a malformed node is refused with a GlowError
naming the node, the input or attribute and what ONNX expects, never a raw IndexError or
ValueError from deep in an importer; reductions over no axes compute what ONNX defines."""

from __future__ import annotations

import os

import numpy as np
import pytest
from onnx import helper
from onnx_cases import check, model_of, normal, one, positive

from glow_core.errors import GlowError, ModelLoadError, ShapeError
from glow_core.frontends.onnx import load_onnx
from glow_core.frontends.onnx.registry import IMPORTERS, Rank
from glow_core.graph.function import Module
from glow_core.limits import physical_memory

# ---- reductions over no axes --------------------------------------------------------------

REDUCTIONS = [
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_noop_with_empty_axes_reduces_each_element_alone(rng, op: str) -> None:
    """noop_with_empty_axes=1 without axes: each element is its own group, so ReduceL2 gives
    |x| (the fuzzer found glow returning x), ReduceSumSquare x * x, ReduceLogSum log(x)."""
    x = normal(rng, 2, 3, 4) * 3 if op != "ReduceLogSum" else positive(rng, 2, 3, 4)
    model = one(op, ["x"], {"x": x}, opset=18, noop_with_empty_axes=1)
    check(model, {"x": x}, engines=("ref", "ort"))


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_of_a_scalar(rng, op: str) -> None:
    """A rank-0 input has no axes to reduce: the same element-wise result."""
    x = np.asarray(-2.5 if op != "ReduceLogSum" else 2.5, np.float32) * rng.uniform(0.5, 2.0)
    x = np.asarray(x, np.float32)
    # onnx.reference's ReduceLogSumExp cannot reduce a scalar (a TypeError inside it).
    engines = ("ort",) if op == "ReduceLogSumExp" else ("ref", "ort")
    check(one(op, ["x"], {"x": x}, opset=18), {"x": x}, engines=engines)


# ---- shared checks ----------------------------------------------------------------------------


def test_rank_rules_read_well() -> None:
    assert str(Rank.exactly(4)) == "rank 4"
    assert str(Rank.at_least(3)) == "rank 3 or more"
    assert str(Rank.between(0, 1)) == "rank 0 or 1"
    assert str(Rank.between(2, 5)) == "rank 2 to 5"
    assert Rank.at_least(3).allows(7) and not Rank.at_least(3).allows(2)


def test_importer_table_declares_ranks() -> None:
    """Ranks are data in the importer table (one rule per op, read by the loader)."""
    assert dict(IMPORTERS["DepthToSpace"].ranks) == {0: Rank.exactly(4)}
    assert dict(IMPORTERS["LSTM"].ranks)[0] == Rank.exactly(3)


def test_wrong_input_rank_is_refused_naming_the_input(rng) -> None:
    x = normal(rng, 3, 8)
    with pytest.raises(ShapeError) as info:
        load_onnx(one("SpaceToDepth", ["x"], {"x": x}, blocksize=2))
    message = str(info.value)
    assert "spacetodepth_node" in message and "input 0 ('x')" in message
    assert "rank 2" in message and "takes rank 4" in message


def test_rank_depending_on_another_input_is_refused(rng) -> None:
    """GatherElements' indices must have the data's rank (the fuzzer's IndexError in iota)."""
    data, index = normal(rng, 3, 4), np.zeros((2, 2, 2), np.int64)
    model = one("GatherElements", ["x", "i"], {"x": data}, inits={"i": index})
    with pytest.raises(ShapeError, match=r"rank 3.*takes rank 2"):
        load_onnx(model)


@pytest.mark.parametrize(
    ("attrs", "words"),
    [
        ({"kernel_shape": [2, 2], "strides": [1, 1, 1]}, "'strides' = [1, 1, 1] has 3 values"),
        ({"kernel_shape": [2, 2], "strides": [0, 1]}, "each strides value >= 1"),
        ({"kernel_shape": [2, 2], "pads": [0, 0]}, "requires 4 (one per begin and end"),
        ({"kernel_shape": [2]}, "'kernel_shape' = [2] has 1 values"),
    ],
)
def test_window_attribute_lists_match_the_spatial_rank(rng, attrs: dict, words: str) -> None:
    x = normal(rng, 1, 2, 5, 5)
    model = one("LpPool", ["x"], {"x": x}, **attrs)
    with pytest.raises(ModelLoadError) as info:
        load_onnx(model)
    assert words in str(info.value) and "lppool_node" in str(info.value)


def test_attribute_below_its_minimum_is_refused(rng) -> None:
    x = normal(rng, 1, 4, 3, 3)
    with pytest.raises(ModelLoadError, match="attribute 'size' is 0, but ONNX requires size >= 1"):
        load_onnx(one("LRN", ["x"], {"x": x}, size=0))


def test_axis_out_of_range_names_the_attribute(rng) -> None:
    x = normal(rng, 2, 3)
    with pytest.raises(
        ShapeError, match=r"attribute 'axis' is 5, out of range for rank 2 \(allowed: -2 to 1\)"
    ):
        load_onnx(one("LayerNormalization", ["x", "s"], {"x": x}, inits={"s": normal(rng, 3)}, axis=5))


def test_undefined_element_type_attribute_is_refused(rng) -> None:
    x = normal(rng, 2, 3)
    model = one("EyeLike", ["x"], {"x": x}, dtype=0)
    with pytest.raises(GlowError, match="attribute 'dtype' has element type UNDEFINED"):
        load_onnx(model)


def test_recurrent_activation_list_must_match_directions(rng) -> None:
    x, w, r = normal(rng, 2, 1, 3), normal(rng, 1, 4, 3), normal(rng, 1, 4, 4)
    inits = {"w": w, "r": r}
    model = one("RNN", ["x", "w", "r"], {"x": x}, inits=inits, hidden_size=4, activations=["Tanh", "Tanh"])
    with pytest.raises(ModelLoadError, match="takes 1 per direction"):
        load_onnx(model)


# ---- integer kinds ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.uint16, np.bool_])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_min_of_integers_keeps_their_order(rng, dtype, last: int) -> None:
    """ArgMin was ArgMax(-x): -x wraps every unsigned value but 0 and the signed minimum."""
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    low, high = (info.min, info.max) if info else (0, 1)
    x = rng.integers(low, int(high) + 1, (3, 5), dtype=np.int64).astype(dtype)
    x[0, 2] = low  # the type's minimum (where -x overflows) is the answer of row 0
    model = one("ArgMin", ["x"], {"x": x}, outputs={"y": 7}, axis=1, select_last_index=last)
    check(model, {"x": x}, engines=("ref",))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.int8])
def test_sign_of_integers(rng, dtype) -> None:
    """Sign of an unsigned tensor splatted -1, which uint8 cannot hold (OverflowError at run time)."""
    x = rng.integers(0 if dtype in (np.uint8, np.uint32) else -5, 6, (4, 3)).astype(dtype)
    x[0, 0] = 0
    typed = {"y": helper.np_dtype_to_tensor_dtype(np.dtype(dtype))}
    check(one("Sign", ["x"], {"x": x}, outputs=typed), {"x": x}, engines=("ref", "ort"))


def test_splat_value_must_fit_its_integer_kind() -> None:
    fn = Module("m").create_function("main")
    with pytest.raises(ShapeError, match="value -1 does not fit uint8"):
        fn.builder().Splat(shape=(2,), value=-1, elem="uint8")


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_reduce_mean_of_integers_truncates(rng, dtype) -> None:
    """The mean of integers is sum / count truncated (glow multiplied by a factor 1/n, 0 as an int)."""
    x = rng.integers(-50, 50, (3, 4)).astype(dtype)  # negative sums truncate toward zero too
    typed = {"y": helper.np_dtype_to_tensor_dtype(np.dtype(dtype))}
    check(one("ReduceMean", ["x"], {"x": x}, outputs=typed, axes=[1]), {"x": x}, engines=("ref", "ort"))


@pytest.mark.parametrize("op", ["Elu", "Selu"])
@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), -2.0])
def test_elu_family_is_piecewise(rng, op: str, alpha: float) -> None:
    """x > 0 gives x (times gamma) whatever alpha is: a NaN alpha made every element NaN."""
    x = normal(rng, 3, 4) * 2
    check(one(op, ["x"], {"x": x}, alpha=alpha), {"x": x}, engines=("ref", "ort"))


@pytest.mark.parametrize("alpha", [-1.0, 0.5])
def test_celu_with_any_alpha_is_as_onnx_writes_it(rng, alpha: float) -> None:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)): with a negative alpha the min is not 0
    for x >= 0 (the fuzzer found glow adding -alpha (exp(-x) - 1) there)."""
    x = normal(rng, 3, 4) * 2
    check(one("Celu", ["x"], {"x": x}, alpha=alpha), {"x": x}, engines=("ref", "ort"))


def test_shrink_of_integers_computes_in_float(rng) -> None:
    x = rng.integers(-6, 7, (4, 5)).astype(np.int64)
    model = one("Shrink", ["x"], {"x": x}, outputs={"y": 7}, lambd=0.794, bias=1.098)
    check(model, {"x": x}, engines=("ref", "ort"))


def test_prelu_with_an_infinite_slope(rng) -> None:
    x = normal(rng, 2, 3)
    model = one("PRelu", ["x", "s"], {"x": x}, inits={"s": np.array([np.inf], np.float32)})
    check(model, {"x": x}, engines=("ref", "ort"))


def test_sign_of_nan_is_nan(rng) -> None:
    x = normal(rng, 2, 3)
    x[0, 1], x[1, 2] = np.nan, 0.0
    check(one("Sign", ["x"], {"x": x}), {"x": x}, engines=("ref", "ort"))


def test_dynamic_quantize_of_nan_has_zero_point_255(rng) -> None:
    x = np.full((2, 3), np.nan, np.float32)
    outputs = {"y": 2, "scale": 1, "zero": 2}
    model = one("DynamicQuantizeLinear", ["x"], {"x": x}, outputs=outputs)
    # onnxruntime skips NaN in the range when some elements are numbers (scale 1, zero 0 when
    # none is); onnx.reference is the definition the fuzzer found glow disagreeing with both on.
    check(model, {"x": x}, engines=("ref",))


def test_flag_attribute_other_than_0_or_1_is_refused(rng) -> None:
    x = normal(rng, 2, 3)
    with pytest.raises(ModelLoadError, match="attribute 'keepdims' is 2, but ONNX allows only 0 or 1"):
        load_onnx(one("ReduceMin", ["x"], {"x": x}, axes=[0], keepdims=2))


def test_split_output_count_must_match_num_outputs() -> None:
    """Checked before load-time folding runs onnx's shape inference, which aborts the process."""
    inits = {"c": np.ones((4, 2), np.float32)}
    model = one("Split", ["c"], {}, inits=inits, outputs=["a", "b"], num_outputs=1, opset=18)
    with pytest.raises(ModelLoadError, match="'num_outputs' is 1, but the node has 2 outputs"):
        load_onnx(model)


def test_reduce_min_of_unsigned_integers(rng) -> None:
    """ReduceMin was -max(-x), which wraps for unsigned kinds."""
    x = rng.integers(0, 4, (4, 4)).astype(np.uint8)
    check(one("ReduceMin", ["x"], {"x": x}, outputs={"y": 2}, axes=[1]), {"x": x}, engines=("ref", "ort"))


def test_default_budget_follows_the_address_space_limit() -> None:
    """Under RLIMIT_AS (a sandbox, ulimit -v), a plan within a quarter of the machine could still
    fail to allocate (MemoryError in the arena): the default budget is a quarter of the limit."""
    import subprocess
    import sys

    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "from glow_core.limits import MemoryLimits; print(MemoryLimits().max_arena_bytes)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GLOW_MAX_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert int(out.stdout) == min(physical_memory(), 3 << 30) // 4


def test_celu_with_a_negative_alpha(rng) -> None:
    """max(0, x) + min(0, alpha (exp(x / alpha) - 1)): the min matters when alpha < 0."""
    x = normal(rng, 3, 4)
    check(one("Celu", ["x"], {"x": x}, alpha=-3.5), {"x": x}, engines=("ref", "ort"))


def test_round_keeps_the_sign_of_zero(rng) -> None:
    """Round(-0.3) is -0.0, so its Reciprocal is -inf (glow gave +inf)."""
    x = np.array([[-0.3, 0.3, -0.7, 2.5, -2.5, -0.0]], np.float32)
    nodes = [
        helper.make_node("Round", ["x"], ["r"]),
        helper.make_node("Reciprocal", ["r"], ["y"]),
    ]
    check(model_of(nodes, {"x": x}), {"x": x}, engines=("ref", "ort"))


def test_constant_folding_leaves_kinds_a_primitive_does_not_declare() -> None:
    """Sub of two bool constants has no semantics: folding it ran numpy's bool subtract
    (TypeError); it is left for the backend's support check to refuse by name."""
    from glow_core.passes.graph_passes import fold_constants

    module = Module("m")
    fn = module.create_function("main")
    b = fn.builder()
    flags = module.create_constant("flags", np.array([True, False]))
    b.save(b.Sub(flags, flags), "y")
    assert not fold_constants(fn)
    assert "Sub" in [n.kind for n in fn.nodes]
