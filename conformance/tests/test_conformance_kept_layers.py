"""Kept layer nodes (recurrences, ConvTranspose, Resize, Einsum, pooling) under the conformance cases
generated from their declarations: the interpreter keeping them passes every case, and a
kernel with one planted bug fails the cases of its own kind, each named by id."""

from __future__ import annotations

import pytest
from fake_plugins import plugin_module
from glow_conformance.primitives_layer import OpCase
from glow_conformance.results import Outcome, Scoreboard
from glow_conformance.suite import SuiteOptions, plan, run_plan
from kept_node_fakes import WRONG_LAYER_KERNELS, KeepsEveryNode

LAYER_KINDS = tuple(WRONG_LAYER_KERNELS)


def _options(kinds: tuple[str, ...]) -> SuiteOptions:
    return SuiteOptions(layers=("primitives",), select=tuple(f"{kind}[*" for kind in kinds))


@pytest.fixture
def layer_fakes(registry):
    for cls in (KeepsEveryNode, *WRONG_LAYER_KERNELS.values()):
        record = registry.register(plugin_module(cls), cls.name)
        assert record.error is None, record.error
    return registry


def _run(name: str, kinds: tuple[str, ...]) -> Scoreboard:
    return run_plan(plan(name, _options(kinds)), isolate=False)


def _cases(name: str, kind: str) -> list[OpCase]:
    return [c for c in plan(name, _options((kind,))).cases if isinstance(c, OpCase) and c.kind == kind]


def test_the_reference_keeping_every_layer_node_passes_its_cases(layer_fakes):
    """Each layer kind has cases (its declared examples and the variants derived from them),
    and the interpreter running the kept nodes by their lowering passes all of them."""
    board = _run("keeps-every-node", LAYER_KINDS)
    results = board.layers["primitives"]
    for kind in LAYER_KINDS:
        assert len([r for r in results if r.id.startswith(f"{kind}[float32-")]) >= 2, kind
    problems = [(r.id, r.message) for r in results if r.outcome is not Outcome.PASSED]
    assert not problems and board.ok


@pytest.mark.parametrize("kind", LAYER_KINDS)
def test_a_planted_layer_kernel_bug_fails_every_case_of_its_kind(layer_fakes, kind):
    """Every case of the kind on random inputs where the bug changes the result (the fake's
    ``bug_shows``: a 1x1 filter hides a missing flip) fails by id with a relative error; a
    case with NaN or infinities planted may hide it behind NaN. The verdict is not ok."""
    fake = WRONG_LAYER_KERNELS[kind]
    board = _run(fake.name, (kind,))
    failing = {r.id for r in board.layers["primitives"] if r.outcome is Outcome.FAILED}
    cases = _cases(fake.name, kind)
    random_inputs = {c.id for c in cases if c.input_class is None and fake.bug_shows(c.types, c.attrs)}
    assert len(random_inputs) >= 2 and random_inputs <= failing <= {c.id for c in cases}
    messages = {r.id: r.message for r in board.layers["primitives"] if r.id in random_inputs}
    assert all("relative error" in m for m in messages.values()), messages
    assert not board.ok
