"""The graph IR: builder, naming, use lists, edits, clone, verifier, dumps and evaluation."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from graph_helpers import new_function, seeded_rng

from glow_core.accuracy import relative_error
from glow_core.errors import GlowError, ShapeError, VerifyError
from glow_core.graph import Builder, Constant, Module, Node, Placeholder
from glow_core.graph.function import SAVE
from glow_core.graph.printer import function_to_dot, function_to_text
from glow_core.graph.verifier import verify
from glow_core.lowering.evaluate import evaluate
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind, Type


def _mlp(rng: np.random.Generator) -> tuple[Module, dict[str, Node]]:
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


# ---- builder -------------------------------------------------------------------------


def test_builder_infers_types() -> None:
    """Each created node carries the type its spec's rule gives."""
    m, nodes = _mlp(seeded_rng("infer"))
    assert nodes["fc"].type == Type((4, 5))
    assert nodes["act"].type == Type((4, 5))
    assert nodes["t"].type == Type((5, 4))
    assert m.placeholders["y"].type == Type((5, 4))
    assert m.placeholders["y"].is_output and not m.placeholders["x"].is_output
    assert nodes["w"].type == Type((3, 5)), "float64 arrays become float32 constants"
    assert nodes["w"].value.dtype == np.float32


def test_builder_keeps_float64_when_asked() -> None:
    """An explicit dtype is honoured (float64 models built in Python stay double); without
    one, numpy's default float64 narrows to float32, and integer constants keep their kind."""
    _, _, b = new_function()
    rng = seeded_rng("f64-constant")
    wide = b.constant(rng.standard_normal((2, 3)), "wide", dtype=np.float64)
    narrow = b.constant(rng.standard_normal((2, 3)), "narrow")
    ints = b.constant(np.arange(4, dtype=np.int64), "ints")
    assert wide.value.dtype == np.float64 and wide.type.elem.name == "float64"
    assert narrow.value.dtype == np.float32
    assert ints.value.dtype == np.int64


def test_builder_names_are_unique() -> None:
    """Default and explicit names never collide, with nodes or with storage."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    r1 = b.Exp(x)
    r2 = b.Exp(r1)
    a = b.Exp(r2, name="same")
    c = b.Exp(a, name="same")
    d = b.Exp(c, name="x")
    assert r1.name == "exp" and r2.name != r1.name
    assert a.name == "same" and c.name != "same" and c.name.startswith("same")
    assert d.name != "x"
    names = [n.name for n in fn.nodes] + list(m.placeholders) + list(m.constants)
    assert len(names) == len(set(names))


def test_builder_prefix_and_constants() -> None:
    """A builder prefix starts default names; two constants of one name get unique names."""
    m, fn, _ = new_function()
    b = Builder(fn, prefix="blk/")
    x = b.placeholder("x", (2,))
    n = b.Tanh(x)
    assert n.name == "blk/tanh"
    c1 = b.constant(np.ones(2), name="k")
    c2 = b.constant(np.ones(2), name="k")
    assert c1.name != c2.name and set(m.constants) == {c1.name, c2.name}


def test_shape_error_names_kind_node_and_types() -> None:
    """The builder's ShapeError names the kind, the node and both types; nothing is added."""
    _, fn, b = new_function()
    x = b.placeholder("x", (4, 3))
    w = b.placeholder("w", (5, 2))
    with pytest.raises(ShapeError) as err:
        b.MatMul(x, w, name="fc")
    assert str(err.value) == "MatMul 'fc': inner dimensions differ: f32<4x3> vs f32<5x2>"
    assert isinstance(err.value, GlowError)
    assert len(fn) == 0


def test_high_level_node_shape_error() -> None:
    """High-level nodes check their operands too (a Conv bias of the wrong size)."""
    _, _, b = new_function()
    x = b.placeholder("x", (1, 3, 8, 8))
    w = b.constant(np.ones((4, 3, 3, 3), np.float32))
    bias = b.constant(np.ones(5, np.float32))
    with pytest.raises(ShapeError, match=r"Conv 'c1': bias must be \[Cout\]: f32<5> vs f32<4x3x3x3>"):
        b.Conv(x, w, bias, name="c1")


def test_builder_attr_errors() -> None:
    """Unknown and missing attributes name the node too."""
    _, _, b = new_function()
    x = b.placeholder("x", (1, 1, 4, 4))
    with pytest.raises(ShapeError, match=r"MaxPool 'p': missing attribute 'kernel'"):
        b.MaxPool(x, name="p")
    with pytest.raises(ShapeError, match=r"MaxPool 'q': unknown attribute\(s\) \['stride'\]"):
        b.MaxPool(x, kernel=(2, 2), stride=(2, 2), name="q")
    with pytest.raises(AttributeError, match="NoSuchOp"):
        b.NoSuchOp(x)


def test_node_fields_read_like_attributes() -> None:
    """Declared operands and attributes read as fields (conv.filter, conv.strides)."""
    _, _, b = new_function()
    x = b.placeholder("x", (1, 2, 5, 5))
    w = b.constant(np.ones((3, 2, 3, 3), np.float32), name="w")
    conv = b.conv(x, w, strides=[2, 2], pads=(1, 1, 1, 1))
    assert conv.kind == "Conv"
    assert conv.filter is w and conv.input is x
    assert conv.strides == (2, 2), "list attributes are frozen to tuples"
    assert conv.type == Type((1, 3, 3, 3))
    with pytest.raises(AttributeError):
        _ = conv.kernel


def test_broadcasting_helpers_match_numpy() -> None:
    """b.add/b.mul broadcast like numpy; b.matmul does batch broadcasting; b.reshape takes 0 and -1."""
    rng = seeded_rng("broadcasting")
    m, fn, b = new_function()
    x = b.placeholder("x", (2, 1, 4))
    v = rng.standard_normal((3, 1)).astype(np.float32)
    s = b.mul(b.add(x, v), 2.0)
    b.save(s, "s")
    a = b.placeholder("a", (2, 3, 4, 5))
    w = b.placeholder("w", (5, 6))
    bm = b.placeholder("bm", (3, 5, 2))
    b.save(b.matmul(a, w), "aw")
    b.save(b.matmul(a, bm), "abm")
    b.save(b.reshape(a, (0, -1, 5)), "r")
    verify(fn)
    feeds = {
        "x": rng.standard_normal((2, 1, 4)).astype(np.float32),
        "a": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
        "w": rng.standard_normal((5, 6)).astype(np.float32),
        "bm": rng.standard_normal((3, 5, 2)).astype(np.float32),
    }
    out = evaluate(m, feeds)
    f64 = {k: v.astype(np.float64) for k, v in feeds.items()}
    assert relative_error(out["s"], (f64["x"] + v) * 2.0) < 1e-6
    assert relative_error(out["aw"], f64["a"] @ f64["w"]) < 1e-6
    assert relative_error(out["abm"], np.matmul(f64["a"], f64["bm"])) < 1e-6
    np.testing.assert_array_equal(out["r"], feeds["a"].reshape(2, 12, 5))
    with pytest.raises(ShapeError, match="do not broadcast"):
        b.add(x, b.placeholder("bad", (3, 5)))


# ---- use lists and edits ----------------------------------------------------------------


def test_use_lists_on_creation() -> None:
    """Each operand records (user, position), once per use."""
    _, _, b = new_function()
    x = b.placeholder("x", (3,))
    y = b.Add(x, x)
    z = b.Mul(y, x)
    assert sorted(x.users, key=lambda u: (u[0].name, u[1])) == [(y, 0), (y, 1), (z, 1)]
    assert y.users == [(z, 0)]
    assert z.inputs == (y, x)


def test_set_input_updates_both_use_lists() -> None:
    """set_input moves the use from the old operand to the new one."""
    _, _, b = new_function()
    x = b.placeholder("x", (3,))
    p = b.placeholder("p", (3,))
    y = b.Add(x, x)
    y.set_input(1, p)
    assert x.users == [(y, 0)]
    assert p.users == [(y, 1)]
    assert y.inputs == (x, p)


def test_replace_all_uses() -> None:
    """Every reader of old reads new; old keeps no users; types must match."""
    _, fn, b = new_function()
    x = b.placeholder("x", (3,))
    old = b.Exp(x)
    new = b.Tanh(x)
    u1 = b.Add(old, old)
    u2 = b.Sqrt(old)
    fn.replace_all_uses(old, new)
    assert old.users == []
    assert sorted(new.users, key=lambda u: (u[0].name, u[1])) == sorted(
        [(u1, 0), (u1, 1), (u2, 0)], key=lambda u: (u[0].name, u[1])
    )
    assert u1.inputs == (new, new) and u2.inputs == (new,)
    other = b.placeholder("o", (4,))
    with pytest.raises(VerifyError, match="types differ"):
        fn.replace_all_uses(new, other)


def test_erase() -> None:
    """Erasing an unused node drops it and its uses; erasing a used node raises and changes nothing."""
    _, fn, b = new_function()
    x = b.placeholder("x", (3,))
    y = b.Exp(x)
    z = b.Tanh(y)
    with pytest.raises(VerifyError, match="still used"):
        fn.erase(y)
    assert y in fn and x.users == [(y, 0)]
    fn.erase(z)
    assert z not in fn and y.users == []
    fn.erase(y)
    assert len(fn) == 0 and x.users == []


def test_topological_order_ignores_insertion_order() -> None:
    """Operands come before users even when nodes were added in reverse."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    a = Node(PRIMITIVES["Exp"], [x], {}, x.type, "a")
    c = Node(PRIMITIVES["Tanh"], [a], {}, x.type, "c")
    d = Node(PRIMITIVES["Add"], [c, a], {}, x.type, "d")
    for n in (d, c, a):
        fn.add(n)
    order = fn.topological_order()
    assert order == [a, c, d]
    assert fn.nodes == [d, c, a]


def test_module_bookkeeping() -> None:
    """Duplicate placeholders/functions are refused; ``function`` needs exactly one."""
    m, _, _ = new_function()
    m.create_placeholder("x", Type((2,)))
    with pytest.raises(VerifyError, match="already exists"):
        m.create_placeholder("x", Type((2,)))
    with pytest.raises(VerifyError, match="already exists"):
        m.create_function("main")
    m.create_function("other")
    with pytest.raises(VerifyError, match="2 functions"):
        _ = m.function


def test_function_inputs_outputs_storage() -> None:
    """inputs are read placeholders, outputs the saved ones, storage everything read."""
    m, nodes = _mlp(seeded_rng("io"))
    fn = m.function
    assert fn.inputs == [nodes["x"]]
    assert [p.name for p in fn.outputs] == ["y", "z"]
    assert {s.name for s in fn.storage()} == {"x", "w", "bias", "y", "z"}
    assert len(fn.saves) == 2


# ---- clone --------------------------------------------------------------------------


def test_clone_is_independent() -> None:
    """Editing a clone leaves the original's nodes, use lists and results untouched."""
    rng = seeded_rng("clone")
    m, _nodes = _mlp(rng)
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    before = evaluate(m, feeds)
    text_before = function_to_text(m.function)
    users_before = {n: list(n.users) for n in m.function.nodes + m.function.storage()}

    copy = m.clone()
    cfn = copy.function
    verify(cfn)
    assert function_to_text(cfn) == text_before
    assert not set(cfn.nodes) & set(m.function.nodes)
    assert not set(cfn.storage()) & set(m.function.storage())
    assert set(copy.placeholders) == set(m.placeholders)
    assert set(copy.constants) == set(m.constants)
    for name, c in copy.constants.items():
        np.testing.assert_array_equal(c.value, m.constants[name].value)

    # edit the clone: drop output z, rewire y to read exp(relu)
    save_z = next(s for s in cfn.saves if s.inputs[1].name == "z")
    exp_node = save_z.inputs[0]
    cfn.erase(save_z)
    cfn.erase(exp_node)
    cb = cfn.builder()
    act = next(n for n in cfn.nodes if n.name == "act")
    cfn.replace_all_uses(act, cb.Exp(act))
    cb.Tanh(copy.placeholders["x"], name="extra")
    verify(cfn)

    assert function_to_text(m.function) == text_before
    assert {n: list(n.users) for n in m.function.nodes + m.function.storage()} == users_before
    verify(m.function)
    after = evaluate(m, feeds)
    for k in before:
        np.testing.assert_array_equal(before[k], after[k])
    assert set(evaluate(copy, feeds)) == {"y"}


# ---- verifier ---------------------------------------------------------------------


def test_verifier_accepts_good_graphs() -> None:
    """A builder-made graph (high-level or lowered) verifies."""
    from glow_core.lowering import lower_function

    m, _ = _mlp(seeded_rng("good"))
    verify(m.function)
    lower_function(m.function)
    verify(m.function)


def test_verifier_catches_tampered_type() -> None:
    """A stored type that disagrees with the type rule is reported with both types."""
    m, nodes = _mlp(seeded_rng("tamper"))
    nodes["t"].type = Type((4, 5))
    with pytest.raises(VerifyError, match=r"Transpose 't' has type f32<4x5> but its operands give f32<5x4>"):
        verify(m.function)


def test_verifier_catches_broken_use_list() -> None:
    """An operand whose use list misses its reader is reported."""
    m, nodes = _mlp(seeded_rng("uses"))
    nodes["fc"].users.remove((nodes["act"], 0))
    with pytest.raises(VerifyError, match="use list of 'fc' misses 'act' operand 0"):
        verify(m.function)


def test_verifier_catches_save_into_input_placeholder() -> None:
    """A Save must write an output placeholder."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    target = b.placeholder("not_out", (3,))
    fn.add(Node(SAVE, [b.Exp(x), target], {}, target.type, "bad_save"))
    with pytest.raises(VerifyError, match="'bad_save' writes 'not_out', which is not an output placeholder"):
        verify(fn)


def test_verifier_catches_output_saved_twice() -> None:
    """Two Saves into one output are reported."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    out = b.save(b.Exp(x), "y")
    fn.add(Node(SAVE, [b.Tanh(x), out], {}, out.type, "again"))
    with pytest.raises(VerifyError, match="saved twice"):
        verify(fn)


def test_verifier_catches_operand_outside_function() -> None:
    """An operand that belongs to no function (or another one) is reported."""
    m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    stray = Node(PRIMITIVES["Exp"], [x], {}, x.type, "stray")
    b.save(b.Tanh(stray, name="reader"), "y")
    with pytest.raises(VerifyError, match=r"Tanh 'reader' operand 0 \('stray'\) is not in the function"):
        verify(fn)
    other = m.create_function("other")
    foreign = other.builder().Exp(x, name="foreign")
    fn2 = m.create_function("third")
    fn2.builder().save(fn2.builder().Sqrt(foreign, name="r2"), "w")
    with pytest.raises(VerifyError, match=r"'foreign'.*not in the function"):
        verify(fn2)


def test_verifier_catches_storage_outside_module() -> None:
    """A Constant not registered in the module is reported."""
    _, fn, b = new_function()
    c = Constant("loose", np.ones(3, np.float32))
    b.save(b.Exp(c), "y")
    with pytest.raises(VerifyError, match="storage 'loose' not in the module"):
        verify(fn)


def test_verifier_lists_every_problem() -> None:
    """All problems are reported together, not just the first."""
    m, nodes = _mlp(seeded_rng("many"))
    nodes["t"].type = Type((4, 5))
    nodes["fc"].users.remove((nodes["act"], 0))
    with pytest.raises(VerifyError) as err:
        verify(m.function)
    assert "has type" in str(err.value) and "use list" in str(err.value)


_CYCLE_SCRIPT = textwrap.dedent(
    """
    from glow_core.errors import VerifyError
    from glow_core.graph import Module
    from glow_core.graph.verifier import verify
    m = Module(); fn = m.create_function(); b = fn.builder()
    x = b.placeholder("x", (3,))
    a = b.Exp(x, name="a"); c = b.Exp(a, name="c"); b.save(c, "y")
    a.set_input(0, c)
    try:
        verify(fn)
    except VerifyError as err:
        print(err)
    """
)


def test_verifier_reports_cycle() -> None:
    """A cycle (a -> c -> a) is reported as 'the graph has a cycle'. Run in a subprocess so a
    verifier that loops forever fails the test instead of hanging it; the bound is generous
    (importing glow_core alone can take seconds on a loaded machine) since it only guards a hang."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CYCLE_SCRIPT], capture_output=True, text=True, timeout=120, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail("verify() did not return on a cyclic graph within 120 s")
    assert "the graph has a cycle" in done.stdout, done.stderr


# ---- dumps -------------------------------------------------------------------------


def test_text_dump_has_a_line_per_node() -> None:
    """The text dump lists storage and one line per node with operands, attributes and type."""
    m, _nodes = _mlp(seeded_rng("text"))
    fn = m.function
    text = function_to_text(fn)
    lines = text.splitlines()
    assert lines[0] == f"function main ({len(fn)} nodes)"
    assert "  %fc = FullyConnected %x, %w, %bias : f32<4x5>" in lines
    assert "  %act = Relu %fc : f32<4x5>" in lines
    assert "  %t = Transpose %act {shuffle=(1,0)} : f32<5x4>" in lines
    assert "  %x = placeholder : f32<4x3>" in lines
    assert "  %y = output : f32<5x4>" in lines
    assert "  %w = constant : f32<3x5>" in lines
    for n in fn.nodes:
        operands = ", ".join(f"%{i.name}" for i in n.inputs)
        matching = [ln for ln in lines if ln.startswith(f"  %{n.name} = {n.kind} {operands}")]
        assert len(matching) == 1, n
        assert matching[0].endswith(f": {n.type}")


def test_dot_dump_has_an_edge_per_operand() -> None:
    """The DOT dump is a digraph with one box per node and one edge per operand use."""
    m, _nodes = _mlp(seeded_rng("dot"))
    fn = m.function
    dot = function_to_dot(fn)
    assert dot.startswith('digraph "main" {')
    assert dot.rstrip().endswith("}")
    edges = [ln.strip() for ln in dot.splitlines() if "->" in ln]
    assert len(edges) == sum(len(n.inputs) for n in fn.nodes)
    for n in fn.nodes:
        for i in n.inputs:
            assert f'"{i.name}" -> "{n.name}";' in edges
        assert f'  "{n.name}" [shape=' in dot
    assert dot.count("shape=ellipse") == len(fn.storage())
    assert "box3d" in dot, "high-level nodes are drawn differently from primitives"


# ---- evaluate ------------------------------------------------------------------------


def test_evaluate_matches_numpy() -> None:
    """Evaluating a tiny hand-built graph gives what numpy computes in float64."""
    rng = seeded_rng("evaluate")
    m, nodes = _mlp(rng)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    out = evaluate(m, {"x": x})
    w = nodes["w"].value.astype(np.float64)
    bias = nodes["bias"].value.astype(np.float64)
    expected_y = np.maximum(x.astype(np.float64) @ w + bias, 0.0).T
    assert set(out) == {"y", "z"}
    assert out["y"].dtype == np.float32 and out["y"].shape == (5, 4)
    assert relative_error(out["y"], expected_y) < 1e-6
    assert relative_error(out["z"], np.exp(x.astype(np.float64))) < 1e-6
    # evaluate works on a copy: the module still holds its high-level nodes
    assert any(n.kind == "FullyConnected" for n in m.function.nodes)


def test_evaluate_integer_graph() -> None:
    """Integer kinds flow through evaluate exactly (Gather of int64 data, Add, Convert)."""
    rng = seeded_rng("evaluate-int")
    m, _fn, b = new_function()
    data = b.placeholder("data", (5, 3), ElemKind.int64)
    idx = b.constant(np.array([4, -1, 0], np.int64), name="idx")
    g = b.Gather(data, idx, axis=0)
    b.save(b.Convert(b.Add(g, g), elem="float32"), "y")
    d = rng.integers(-100, 100, (5, 3)).astype(np.int64)
    out = evaluate(m, {"data": d})["y"]
    np.testing.assert_array_equal(out, (2 * d[[4, -1, 0]]).astype(np.float32))


def test_evaluate_missing_input() -> None:
    """A missing input is an InputError (a GlowError) naming it."""
    m, _ = _mlp(seeded_rng("missing"))
    with pytest.raises(GlowError, match="missing input 'x'"):
        evaluate(m, {})


def test_placeholder_and_constant_are_storage() -> None:
    """Storage nodes are kinds of their own with no operands."""
    ph = Placeholder("p", Type((2,)))
    c = Constant("c", np.zeros((2,), np.float32))
    assert ph.kind == "Placeholder" and c.kind == "Constant"
    assert ph.inputs == () and c.inputs == ()
    assert c.type == Type((2,))
