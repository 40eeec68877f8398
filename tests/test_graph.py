"""The graph IR: builder, naming, use lists, edits and clone (verifier, dumps and evaluation:
test_graph_checks.py)."""

from __future__ import annotations

import numpy as np
import pytest
from graph_helpers import mlp_module, new_function, seeded_rng

from glow_core.accuracy import relative_error
from glow_core.errors import GlowError, ShapeError, VerifyError
from glow_core.graph import Builder, Node
from glow_core.graph.printer import function_to_text
from glow_core.graph.verifier import verify
from glow_core.lowering.evaluate import evaluate
from glow_core.spec import PRIMITIVES
from glow_core.types import ElemKind, Type

# ---- builder -------------------------------------------------------------------------


def test_builder_infers_types() -> None:
    """Each created node carries the type its spec's rule gives."""
    m, nodes = mlp_module(seeded_rng("infer"))
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


def _fresh_order(fn) -> list[Node]:
    """A recursive depth-first post-order, written apart from ``Function`` to check it."""
    order: list[Node] = []
    done: set[Node] = set()

    def visit(n: Node) -> None:
        if n in done or n.kind in ("Placeholder", "Constant"):
            return
        done.add(n)
        for d in n.dependencies:
            visit(d)
        order.append(n)

    for n in fn.nodes:
        visit(n)
    return order


@pytest.mark.parametrize("seed", range(12))
def test_topological_order_is_the_depth_first_order(seed: int) -> None:
    """Random DAGs added in a shuffled order, with repeated operands, constants and
    predicates: the walk gives exactly the reference depth-first order."""
    rng = np.random.default_rng(1000 + seed)
    _m, fn, b = new_function()
    x = b.placeholder("x", (4,))
    flag = b.placeholder("flag", (1,), ElemKind.bool)
    k = b.constant(rng.standard_normal(4).astype(np.float32), "k")
    values: list[Node] = [x, k]
    made: list[Node] = []
    for i in range(int(rng.integers(5, 60))):
        left, right = (values[int(j)] for j in rng.integers(0, len(values), 2))
        kind = ("Add", "Mul", "Sub")[i % 3]
        node = Node(PRIMITIVES[kind], [left, right], {}, x.type, f"n{i}")
        if rng.random() < 0.1:
            node.predicate = flag
        values.append(node)
        made.append(node)
    for j in rng.permutation(len(made)):
        fn.add(made[int(j)])
    assert fn.topological_order() == _fresh_order(fn)


def test_cached_topological_order_follows_every_edit() -> None:
    """The order is cached between edits: each kind of edit (add, set_input, a predicate set
    or cleared, replace_all_uses, erase, a node of another function) gives the recomputed
    order, and a caller editing the returned list does not change the next answer."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    cond = b.placeholder("cond", (1,), ElemKind.bool)
    late = Node(PRIMITIVES["Exp"], [x], {}, x.type, "late")
    a = b.Tanh(x)
    c = b.Add(a, x)
    d = b.Sqrt(c)
    checks = 0

    def check() -> None:
        nonlocal checks
        first = fn.topological_order()
        assert first == _fresh_order(fn)
        first.reverse()
        assert fn.topological_order() == _fresh_order(fn)
        checks += 1

    check()
    fn.add(late)
    check()
    c.set_input(1, late)  # c now comes after late, which was added last
    check()
    n = b.Exp(a)
    flag = b.Compare(b.Slice(n, starts=(0,), ends=(1,)), b.Slice(a, starts=(0,), ends=(1,)), predicate="lt")
    d.predicate = flag
    check()
    d.predicate = None
    check()
    d.set_input(0, late)
    fn.replace_all_uses(late, b.Relu(late))
    check()
    for dead in (flag, *flag.inputs, n):
        fn.erase(dead)
        check()
    other = _m.create_function("other")
    other.builder().Exp(x)  # an edit elsewhere only costs a recomputation
    check()
    a.predicate = cond
    check()
    assert checks == 12


def test_topological_order_still_finds_a_cycle_made_after_caching() -> None:
    """An edit that closes a cycle is seen even when the order was cached before it."""
    _m, fn, b = new_function()
    x = b.placeholder("x", (3,))
    a = b.Exp(x)
    c = b.Tanh(a)
    fn.topological_order()
    a.set_input(0, c)
    with pytest.raises(VerifyError, match="cycle"):
        fn.topological_order()


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
    m, nodes = mlp_module(seeded_rng("io"))
    fn = m.function
    assert fn.inputs == [nodes["x"]]
    assert [p.name for p in fn.outputs] == ["y", "z"]
    assert {s.name for s in fn.storage()} == {"x", "w", "bias", "y", "z"}
    assert len(fn.saves) == 2


# ---- clone --------------------------------------------------------------------------


def test_clone_is_independent() -> None:
    """Editing a clone leaves the original's nodes, use lists and results untouched."""
    rng = seeded_rng("clone")
    m, _nodes = mlp_module(rng)
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
