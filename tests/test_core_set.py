"""The core primitive set is closed: lowerings and the zoo models need nothing outside it and the views."""

from __future__ import annotations

import pytest
from zoo_modules import zoo_module, zoo_names

from glow_core.graph import Module
from glow_core.lowering import lower_function
from glow_core.primitives import CORE, VIEWS
from glow_core.spec import NODES, PRIMITIVES


def _kinds_after_lowering(module: Module) -> set[str]:
    fn = module.function
    lower_function(fn)
    return {n.kind for n in fn.nodes if n.kind != "Save"}


@pytest.mark.parametrize("kind", sorted(NODES))
def test_every_node_lowers_into_core_primitives(kind):
    spec = NODES[kind]
    for example in spec.examples:
        m = Module()
        fn = m.create_function()
        b = fn.builder()
        operands = [b.placeholder(f"in{i}", t.shape, t.elem) for i, t in enumerate(example.types())]
        b.save(b.create(kind, *operands, **example.attrs), "out")
        assert _kinds_after_lowering(m) <= CORE | VIEWS


@pytest.mark.parametrize("name", zoo_names())
def test_zoo_models_need_only_core_primitives(name):
    assert _kinds_after_lowering(zoo_module(name)) <= CORE | VIEWS


def test_core_is_a_subset_of_the_registry():
    assert set(PRIMITIVES) >= CORE and len(CORE) >= 20


def test_core_membership_is_declared_and_views_are_never_core():
    assert {name for name, spec in PRIMITIVES.items() if spec.core} == CORE
    assert {"Reshape", "BitCast"} == VIEWS and not CORE & VIEWS
