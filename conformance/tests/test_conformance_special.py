"""Special input values, per-axis attributes and run seeds: the cases that catch what moderate
random inputs and symmetric attributes let through."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from glow_conformance.case import SEED_ENV, resolve_seed
from glow_conformance.compare import check_result
from glow_conformance.input_classes import CLASSES_BY_NAME, classes_for
from glow_conformance.primitives_layer import OpCase, claim_cases
from glow_conformance.results import Outcome
from glow_conformance.suite import SuiteOptions, plan, run_plan
from glow_conformance.variants import attr_variants

from glow_core.errors import GlowError
from glow_core.primitives.elementwise import _divide
from glow_core.spec import spec_of
from glow_core.types import ElemKind, Type

PRIMITIVES_ONLY = SuiteOptions(layers=("primitives",))


def _names(kind: str, elem: ElemKind) -> set[str]:
    return {c.name for c in classes_for(kind, [elem], True)}


def test_every_kind_gets_its_classes():
    floats = {"nan", "inf", "zero", "denormal", "huge"}
    for elem in (ElemKind.float32, ElemKind.float16, ElemKind.bfloat16, ElemKind.float64):
        assert _names("Add", elem) == floats
    assert _names("Add", ElemKind.int8) == {"limits"}
    assert _names("Add", ElemKind.int32) == _names("Add", ElemKind.uint64) == {"limits", "wide"}
    assert _names("ReduceSum", ElemKind.float32) == floats - {"huge"}  # overflow depends on order
    assert "nan" in _names("MaxPool", ElemKind.float32)  # NaN never wins a window: checked
    convert = {c.name for c in classes_for("Convert", [ElemKind.float32], True)}
    assert convert == floats  # an operand's kind decides, not the result's
    wide64 = CLASSES_BY_NAME["wide"].values(ElemKind.int64)
    assert 2**53 + 1 in wide64 and 2**24 + 1 in wide64 and -(2**53 + 1) in wide64
    huge = CLASSES_BY_NAME["huge"].values(ElemKind.float16)
    assert 65504.0 in huge and any(np.log(65504) < v < 12 for v in huge)  # exp of it overflows


def test_planted_values_meet_ordinary_ones():
    rng = np.random.default_rng(7)
    base = rng.standard_normal(400).astype(np.float32)
    planted = CLASSES_BY_NAME["nan"].plant(rng, base, ElemKind.float32)
    share = np.isnan(planted).mean()
    assert 0.2 < share < 0.5 and np.array_equal(planted[~np.isnan(planted)], base[~np.isnan(planted)])
    denormals = CLASSES_BY_NAME["denormal"].plant(rng, base, ElemKind.float32)
    assert np.all(np.abs(denormals) <= 2 * np.finfo(np.float32).smallest_normal)
    assert np.any(np.abs(denormals) < np.finfo(np.float32).smallest_normal)


def test_special_comparison():
    t = Type((4,), ElemKind.float32)
    want = np.array([np.nan, np.inf, -0.0, 1.5])
    ok = np.array([np.nan, np.inf, -0.0, 1.5], np.float32)
    assert check_result(ok, want, t).outcome is Outcome.PASSED
    dropped = np.array([2.0, np.inf, -0.0, 1.5], np.float32)
    assert "NaN or infinity; first at [0]: got 2.0, expected nan" in check_result(dropped, want, t).message
    saturated = np.array([np.nan, np.finfo(np.float32).max, -0.0, 1.5], np.float32)
    assert "expected inf" in check_result(saturated, want, t).message
    unsigned = np.array([np.nan, np.inf, 0.0, 1.5], np.float32)
    assert "zeros have the wrong sign" in check_result(unsigned, want, t).message
    assert check_result(unsigned, want, t, zero_sign=False).outcome is Outcome.PASSED
    # A float64 sum of two float32 maxima is inf once rounded to the result kind.
    big = float(np.finfo(np.float32).max)
    overflow = np.array([np.nan, np.inf, -0.0, np.inf], np.float32)
    assert check_result(overflow, np.array([np.nan, np.inf, -0.0, 2 * big]), t).outcome is Outcome.PASSED


def test_integer_division_is_exact_past_float_mantissas():
    lhs = np.array([2**53 + 1, -(2**62 + 1), 7, -7, 7, -7], np.int64)
    rhs = np.array([1, 3, 2, 2, -2, -2], np.int64)
    assert _divide(lhs, rhs).tolist() == [2**53 + 1, -1537228672809129301, 3, -3, -3, 3]
    unsigned = np.array([2**64 - 1], np.uint64)
    assert _divide(unsigned, np.array([1], np.uint64)).tolist() == [2**64 - 1]
    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        _divide(np.array([-(2**31)], np.int32), np.array([-1], np.int32))


def test_special_cases_exist_only_where_the_reference_defines_them():
    ids = {c.id for c in claim_cases("Convert", "int32")[0]}
    assert "Convert[int32-f32.4x5-values=zero]" in ids  # -0.0 converts to 0
    assert not any(i.endswith(("values=nan]", "values=inf]", "values=huge]")) for i in ids)  # undefined
    ids = {c.id for c in claim_cases("Convert", "float64")[0]}
    assert "Convert[float64-i64.7-values=wide]" in ids and "Convert[float64-f32.4x5-values=nan]" in ids


def test_per_axis_variants_differ_per_axis_and_side():
    spec = spec_of("MaxPool")
    types = tuple(spec.examples[0].types())
    variants = list(attr_variants(spec, types, dict(spec.examples[0].attrs)))
    strides = {v.get("strides") for v in variants}
    pads = {v.get("pads") for v in variants}
    assert (3, 2) in strides and (2, 3) in strides
    assert (1, 0, 0, 0) in pads and (0, 0, 0, 1) in pads  # begin and end differ
    concat = spec_of("Concat")
    example = concat.examples[0]
    axes = {v["axis"] for v in attr_variants(concat, tuple(example.types()), dict(example.attrs))}
    assert -1 in axes  # the negative spelling of axis 1
    slice_ids = {c.id for c in claim_cases("Slice", "float32")[0]}
    assert "Slice[float32-6x7-ends=-1x7,starts=5x1,steps=-2x3]" in slice_ids


def test_a_max_dropping_nan_fails_exactly_its_nan_cases(more_fakes):
    board = run_plan(plan("nan-dropping-max", PRIMITIVES_ONLY))
    failing = {r.id for r in board.problems()}
    assert failing == {"Max[float32-4x5_4x5-values=nan]"}
    assert "expected nan" in board.problems()[0].message


def test_a_pooling_kernel_with_the_row_stride_for_columns_fails_only_asymmetric_cases(more_fakes):
    cases = plan("row-stride-maxpool", PRIMITIVES_ONLY).cases
    board = run_plan(plan("row-stride-maxpool", PRIMITIVES_ONLY))
    failing = {r.id for r in board.problems()}
    asymmetric = {
        c.id
        for c in cases
        if isinstance(c, OpCase) and c.attrs.get("strides", (0, 0))[0] != c.attrs.get("strides", (0, 0))[1]
    }
    assert failing and failing <= asymmetric


def test_a_claim_keyed_by_operand_kind_is_checked_with_operands_of_that_kind(more_fakes):
    # ArgMax gives int64 whatever it reads: its int64 claim once ran the float32 example.
    cases = [c for c in plan("int64-argmin", PRIMITIVES_ONLY).cases if isinstance(c, OpCase)]
    assert cases and all(t.elem is ElemKind.int64 for c in cases for t in c.types)
    board = run_plan(plan("int64-argmin", PRIMITIVES_ONLY))
    assert {r.id for r in board.problems()} >= {"ArgMax[int64-4x5]", "ArgMax[int64-4x5-values=wide]"}


def test_no_two_primitive_cases_check_the_same_thing():
    seen: dict[tuple, str] = {}
    for case in plan("interpreter", PRIMITIVES_ONLY).cases:
        if isinstance(case, OpCase):
            attrs = spec_of(case.kind).complete_attrs(case.attrs)
            key = (case.kind, case.types, repr(sorted(attrs.items())), case.input_class)
            assert key not in seen, f"{case.id} repeats {seen[key]}"
            seen[key] = case.id


def test_run_seeds_change_per_run_and_replay(monkeypatch):
    monkeypatch.delenv(SEED_ENV, raising=False)
    first, second = resolve_seed(), resolve_seed()
    assert first != second  # 1 in 2**32 to collide
    options = SuiteOptions(layers=("primitives",), select=("Add[float32-4x5_4x5]",))
    a, b = plan("interpreter", options), plan("interpreter", options)
    assert a.cases[0].seed != b.cases[0].seed
    replay = plan(
        "interpreter",
        SuiteOptions(layers=("primitives",), select=a.cases[0:1] and ("Add[float32-4x5_4x5]",), seed=a.seed),
    )
    assert replay.cases[0].seed == a.cases[0].seed
    monkeypatch.setenv(SEED_ENV, "0")
    pinned = plan("interpreter", options).cases[0]
    assert pinned.seed == zlib.crc32(b"Add[float32-4x5_4x5]")  # seed 0: the id alone, as before
    monkeypatch.setenv(SEED_ENV, "zero")
    with pytest.raises(GlowError, match="not an integer seed"):
        resolve_seed()
    with pytest.raises(GlowError, match="out of range"):
        resolve_seed(2**32)


def test_a_failure_names_its_seed_and_replays(more_fakes, capsys):
    from glow_conformance.cli import main

    args = ["--backend", "nan-dropping-max", "--layers", "primitives", "--in-process"]
    assert main([*args, "--seed", "12345"]) == 1
    out = capsys.readouterr().out
    assert (
        "seed 12345" in out and "replay with --seed 12345 --select 'Max[float32-4x5_4x5-values=nan]'" in out
    )
    assert main([*args, "--seed", "12345", "--select", "Max[float32-4x5_4x5-values=nan]"]) == 1
    assert "nan-dropping-max: 1 cases" in capsys.readouterr().out


def test_self_test_cli_exit_status_names_every_escape(monkeypatch, capsys):
    from glow_conformance import self_test
    from glow_conformance.cli import main

    caught = self_test.MutantResult("max-drops-nan", "drops NaN", "Max[float32-4x5_4x5-values=nan]")
    escaped = self_test.MutantResult("exp-saturates", "saturates")
    report = self_test.SelfTestReport([caught, escaped], 7, 1.0)
    monkeypatch.setattr(self_test, "run_self_test", lambda **kwargs: report)
    assert main(["--self-test"]) == 1
    out = capsys.readouterr().out
    assert "caught   max-drops-nan: by Max[float32-4x5_4x5-values=nan]" in out
    assert "ESCAPED  exp-saturates (saturates)" in out and "1/2 planted bugs caught (50.0%)" in out
    monkeypatch.setattr(
        self_test, "run_self_test", lambda **kwargs: self_test.SelfTestReport([caught], 7, 1.0)
    )
    assert main(["--self-test"]) == 0
