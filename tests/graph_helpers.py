"""Small builders shared by the graph-level tests."""

from __future__ import annotations

import zlib
from collections import Counter

import numpy as np

from glow_core.graph import Builder, Function, Module, Node


def seeded_rng(name: str) -> np.random.Generator:
    """A generator seeded from ``name``: different per test, stable across runs."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def new_function() -> tuple[Module, Function, Builder]:
    """A module with one empty function ``main`` and a builder for it."""
    m = Module("m")
    fn = m.create_function("main")
    return m, fn, fn.builder()


def mlp_module(rng: np.random.Generator) -> tuple[Module, dict[str, Node]]:
    """x[4,3] -> fc(w[3,5], bias[5]) -> relu -> transpose -> save y; also save z = exp(x)."""
    m, _fn, b = new_function()
    x = b.placeholder("x", (4, 3))
    w = b.constant(rng.standard_normal((3, 5)), name="w")
    bias = b.constant(rng.standard_normal(5), name="bias")
    fc = b.FullyConnected(x, w, bias, name="fc")
    relu = b.Relu(fc, name="act")
    t = b.Transpose(relu, shuffle=(1, 0), name="t")
    b.save(t, "y")
    b.save(b.Exp(x, name="e"), "z")
    return m, {"x": x, "w": w, "bias": bias, "fc": fc, "act": relu, "t": t}


def kinds_of(fn: Function) -> Counter[str]:
    return Counter(n.kind for n in fn.nodes)


def random_feeds(m: Module, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Standard-normal values for every input placeholder (never zeros)."""
    out = {}
    for ph in m.function.inputs:
        out[ph.name] = rng.standard_normal(ph.type.shape).astype(ph.type.dtype)
    return out
