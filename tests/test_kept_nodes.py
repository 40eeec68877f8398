"""Kept high-level nodes end to end: a backend that keeps LayerNorm, Gelu and Attention gets
each as one IR instruction (recognized from the primitive patterns exporters write, or built
by the ONNX importer), and the interpreter, keeping them, still matches an independent oracle.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import glow_core
from glow_core.accuracy import onnxruntime_outputs, relative_error
from glow_core.cli import main
from glow_core.frontends.onnx import load_onnx
from glow_core.graph import Module
from glow_core.lowering.evaluate import evaluate
from glow_core.model_zoo import bert_mini, transformer_encoder
from glow_core.passes.recognize_nodes import recognize_nodes
from glow_core.runtime.pipeline import compile_stages
from glow_core.spec import NODES

BERT_KEPT = ("LayerNorm", "Gelu", "Attention")


def _instruction_kinds(model, backend) -> Counter[str]:
    stages = compile_stages(load_onnx(model), backend, verify_each=True)
    assert stages.ir is not None
    return Counter(i.kind for i in stages.ir.compute_instrs())


def test_bert_mini_with_layernorm_gelu_attention_kept_matches_onnxruntime(rng) -> None:
    """4 layers: 8 LayerNorm, 4 Gelu, 4 Attention instructions, none of their primitives left;
    the interpreter runs them by their declared semantics within 1e-4 of onnxruntime."""
    model = bert_mini()
    backend = InterpreterBackend(keep=BERT_KEPT)
    kinds = _instruction_kinds(model, backend)
    assert (kinds["LayerNorm"], kinds["Gelu"], kinds["Attention"]) == (8, 4, 4)
    assert not {"Erf", "Exp", "ReduceMax", "ReduceSum", "BatchMatMul", "Sqrt"} & set(kinds), kinds

    x = rng.standard_normal((1, 128, 256)).astype(np.float32)
    expected = onnxruntime_outputs(model, {"input": x})["output"]
    got = glow_core.compile(model, backend=backend).run({"input": x})["output"]
    assert relative_error(got, expected) <= 1e-4


def test_glow_dump_shows_kept_nodes_as_single_instructions(registry, capsys) -> None:
    """``glow dump --stage ir --keep ...``: one instruction per kept node, by its kind name."""
    assert main(["dump", "zoo:transformer_encoder", "--backend", "interpreter", "--stage", "ir",
                 "--keep", "LayerNorm,Gelu", "--keep", "Attention"]) == 0  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    instructions = Counter(line.split()[1] for line in lines if line.strip()[:1].isdigit())
    assert (instructions["LayerNorm"], instructions["Gelu"], instructions["Attention"]) == (2, 1, 1)
    assert "Erf" not in instructions and "Softmax" not in instructions


def test_dump_refuses_keep_for_a_backend_that_cannot(capsys, monkeypatch) -> None:
    """A backend whose constructor takes no keep= is named in a clear error, exit status 1."""
    from glow_core import cli

    class Plain(InterpreterBackend):
        name = "plain"

        def __init__(self) -> None:
            super().__init__()

    monkeypatch.setattr("glow_core.plugins.get_backend", lambda name=None: Plain())
    assert cli.main(["dump", "zoo:mlp", "--stage", "ir", "--keep", "Gelu"]) != 0
    assert "cannot be asked to keep nodes" in capsys.readouterr().err


def test_backends_that_lower_see_the_patterns_unchanged(rng) -> None:
    """Recognition builds a node only for a backend that keeps it: the plain interpreter gets
    the exporter's primitives and exactly the outputs it computed before recognition existed."""
    model = transformer_encoder()
    plain = InterpreterBackend()
    kinds = _instruction_kinds(model, plain)
    assert not {"Gelu", "Attention", "LayerNorm"} & set(kinds)
    assert kinds["Erf"] == 1 and kinds["BatchMatMul"] == 2

    x = rng.standard_normal((1, 16, 64)).astype(np.float32)
    got = glow_core.compile(model, backend=plain).run({"input": x})["output"]
    reference = evaluate(load_onnx(model), {"input": x})["output"]  # no recognition here
    np.testing.assert_array_equal(got, reference)


# ---- the recognition patterns ----------------------------------------------------------------


def _gelu_module(order: str, share: bool = False) -> Module:
    """x * (1 + erf(x / sqrt 2)) * 0.5 with the three factors multiplied in ``order``."""
    m = Module("gelu")
    b = m.create_function().builder()
    x = b.placeholder("x", (3, 5))
    gate = b.add(b.Erf(b.div(x, b.constant(math.sqrt(2.0)))), b.constant(1.0))
    half = b.constant(0.5)
    y = {
        "x*gate*half": lambda: b.mul(b.mul(x, gate), half),
        "half*gate*x": lambda: b.mul(b.mul(half, gate), x),
        "x*half*gate": lambda: b.mul(b.mul(x, half), gate),
    }[order]()
    b.save(y, "y")
    if share:  # the gate is read elsewhere too: the pattern's values are needed as they are
        b.save(gate, "gate")
    return m


@pytest.mark.parametrize("order", ["x*gate*half", "half*gate*x", "x*half*gate"])
def test_gelu_pattern_becomes_one_gelu_node(order: str, rng) -> None:
    m = _gelu_module(order)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    before = evaluate(m, {"x": x})["y"]
    assert recognize_nodes(m.function, lambda n: True) is True
    kinds = Counter(n.kind for n in m.function.nodes)
    assert kinds["Gelu"] == 1 and not {"Erf", "Mul", "Div"} & set(kinds), kinds
    assert relative_error(evaluate(m, {"x": x})["y"], before) < 1e-6


def test_patterns_are_left_alone_when_not_kept_or_shared() -> None:
    """No rewrite when the backend would lower the node, or when an intermediate has other readers."""
    for m, keeps in (
        (_gelu_module("x*gate*half"), lambda n: False),
        (_gelu_module("x*gate*half", True), None),
    ):
        nodes_before = [(n.kind, n.name) for n in m.function.nodes]
        assert recognize_nodes(m.function, keeps or (lambda n: True)) is False
        assert [(n.kind, n.name) for n in m.function.nodes] == nodes_before


# ---- ONNX Attention ---------------------------------------------------------------------------


def _onnx_attention(causal: int) -> tuple[object, dict[str, np.ndarray]]:
    rng = np.random.default_rng(causal)
    shapes = {"Q": (2, 4, 5, 8), "K": (2, 2, 5, 8), "V": (2, 2, 5, 6)}
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    node = helper.make_node("Attention", ["Q", "K", "V"], ["Y"], is_causal=causal)
    graph = helper.make_graph(
        [node],
        "attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    return model, feeds


@pytest.mark.parametrize(("causal", "kind"), [(0, "Attention"), (1, "MaskedAttention")])
def test_onnx_attention_is_one_kept_instruction(causal: int, kind: str) -> None:
    """ONNX Attention (grouped-query heads; causal: with the -inf frontier as a bias) reaches a
    backend keeping the node as one instruction, and matches onnx.reference."""
    model, feeds = _onnx_attention(causal)
    backend = InterpreterBackend(keep=("Attention", "MaskedAttention"))
    kinds = _instruction_kinds(model, backend)
    assert kinds[kind] == 1 and "BatchMatMul" not in kinds and "Exp" not in kinds, kinds
    got = glow_core.compile(model, backend=backend).run(feeds)["Y"]
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    assert relative_error(got, expected) < 1e-5


def test_the_node_catalogue_lists_every_node_kind() -> None:
    """docs/high-level-nodes.md has one table row per declared node kind, no more."""
    page = Path(__file__).resolve().parent.parent / "docs" / "high-level-nodes.md"
    rows = re.findall(r"^\| `(\w+)` \|", page.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sorted(rows) == sorted(NODES)
