"""The partitioner's phases, each on graphs built with the Builder (no model files)."""

from __future__ import annotations

import numpy as np
import pytest
from glow_interpreter.backend import InterpreterBackend
from graph_helpers import new_function
from partition_helpers import Restricted, conv_matmul_backend

from glow_core.errors import BackendError, NoBackendError, PartitionError
from glow_core.graph.node import Node
from glow_core.partition import PartitionPlan, partition_function, resolve_devices
from glow_core.partition.cost import flops
from glow_core.partition.dag import group_by_level
from glow_core.partition.memory import crossing_bytes
from glow_core.schedule import schedule


def _weights(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def _owner(plan: PartitionPlan) -> dict[str, int]:
    return {n.name: p.index for p in plan.partitions for n in p.nodes}


def _assert_dag_in_order(plan: PartitionPlan) -> None:
    """Every partition reads only from partitions listed before it, and every read is written."""
    written: set[str] = {p.name for p in plan.function.inputs}
    for p in plan.partitions:
        assert all(before < p.index for before in p.after), (p.index, p.after)
        assert set(p.reads) <= written, set(p.reads) - written
        written |= set(p.writes)


def _diamond(rng: np.random.Generator):
    """m1 -> tanh -> m2 and m1 -> m3, then add(m2, m3): MatMuls on one device, the rest on
    another would cycle if all MatMuls merged into one partition."""
    m, fn, b = new_function()
    x = b.placeholder("x", [4, 8])
    m1 = b.MatMul(x, b.constant(_weights(rng, 8, 8)), name="m1")
    t = b.Tanh(m1, name="t")
    m2 = b.MatMul(t, b.constant(_weights(rng, 8, 8)), name="m2")
    m3 = b.MatMul(m1, b.constant(_weights(rng, 8, 8)), name="m3")
    fn.save(b.Add(m2, m3, name="sum"), "out")
    return m, fn


def test_support_sends_each_node_to_the_first_backend_that_runs_it(rng):
    _, fn = _diamond(rng)
    devices = resolve_devices([Restricted(["MatMul"]), InterpreterBackend()])
    plan = partition_function(fn, devices, merge_islands=False)
    where = {n.name: p.device.label for p in plan.partitions for n in p.nodes}
    assert {where["m1"], where["m2"], where["m3"]} == {"acme"}
    assert where["t"] == where["sum"] == "interpreter"


def test_a_dag_that_would_cycle_if_merged_naively_is_split(rng):
    _, fn = _diamond(rng)
    devices = resolve_devices([Restricted(["MatMul"]), InterpreterBackend()])
    plan = partition_function(fn, devices, merge_islands=False)
    owner = _owner(plan)
    # m1 and m3 are neighbours on acme: one partition. m2 comes after t (on the interpreter),
    # which reads m1: putting m2 with m1 would make the two partitions wait for each other.
    assert owner["m1"] == owner["m3"]
    assert owner["m2"] != owner["m1"]
    assert len(plan.partitions) == 4
    _assert_dag_in_order(plan)
    assert sorted(plan.boundaries) == ["m1", "m2", "m3", "t"]


def test_levels_merge_neighbours_and_order_groups_by_dependency(rng):
    _, fn = _diamond(rng)
    order = schedule(fn)
    assignment = {n: (0 if n.kind == "MatMul" else 1) for n in order}
    groups = group_by_level(order, assignment)
    names = [sorted(n.name for n in nodes) for _, nodes in groups]
    assert names[0] == ["m1", "m3"]
    assert [d for d, _ in groups] == [0, 1, 0, 1]


def test_a_high_level_node_an_earlier_backend_runs_in_part_is_lowered_for_it(rng):
    _m, fn, b = new_function()
    x = b.placeholder("x", [1, 3, 8, 8])
    y = b.Conv(x, b.constant(_weights(rng, 4, 3, 3, 3)), b.constant(_weights(rng, 4)), name="conv")
    fn.save(b.relu(y), "out")
    devices = resolve_devices([conv_matmul_backend(), InterpreterBackend()])
    plan = partition_function(fn, devices, merge_islands=False)
    kinds = {p.device.label: sorted({n.kind for n in p.nodes}) for p in plan.partitions}
    assert kinds["acme"] == ["Convolution"]
    assert "Conv" not in kinds["interpreter"] and "Add" in kinds["interpreter"]


def test_a_node_the_first_backend_runs_whole_stays_whole(rng):
    _m, fn, b = new_function()
    x = b.placeholder("x", [1, 3, 8, 8])
    y = b.Conv(x, b.constant(_weights(rng, 4, 3, 3, 3)), b.constant(_weights(rng, 4)), name="conv")
    fn.save(y, "out")
    plan = partition_function(fn, resolve_devices([InterpreterBackend(), conv_matmul_backend()]))
    assert [n.kind for n in plan.partitions[0].nodes] == ["Conv", "Save"]


def test_no_backend_for_a_node_is_refused_with_kind_element_kind_and_backends(rng):
    _, fn = _diamond(rng)
    devices = resolve_devices([Restricted(["MatMul"]), Restricted(["Add"], name="adder")])
    with pytest.raises(NoBackendError) as err:
        partition_function(fn, devices)
    message = str(err.value)
    assert "Tanh[float32] 't'" in message
    assert "['acme', 'adder']" in message
    assert "sum" not in message  # Add runs on 'adder'


def test_an_unknown_backend_in_the_list_is_refused_with_the_list(registry):
    with pytest.raises(
        BackendError, match=r"in the backend list \['interpreter', 'acme9'\]: no backend named"
    ):
        resolve_devices(["interpreter", "acme9"])


def test_repeated_backends_get_numbered_labels_and_keyed_options(registry):
    devices = resolve_devices(
        ["interpreter", "interpreter"], {"interpreter:1": {"memory_bytes": 1000}, "interpreter:0": {}}
    )
    assert [d.label for d in devices] == ["interpreter:0", "interpreter:1"]
    assert [d.capacity for d in devices] == [None, 1000]
    shared = resolve_devices(["interpreter", "interpreter"], {"memory_bytes": 5000})
    assert [d.capacity for d in shared] == [5000, 5000]
    with pytest.raises(BackendError, match="memory_bytes"):
        resolve_devices(["interpreter"], {"memory_bytes": 0})


def _mlp_chain(rng: np.random.Generator, layers: int = 4, width: int = 256):
    m, fn, b = new_function()
    y = b.placeholder("x", [1, width])
    for i in range(layers):
        y = b.Tanh(b.MatMul(y, b.constant(_weights(rng, width, width)), name=f"fc{i}"), name=f"act{i}")
    fn.save(y, "out")
    return m, fn


def test_a_partition_over_device_memory_is_split_in_schedule_order_and_placed(rng):
    _, fn = _mlp_chain(rng)  # 4 x 256 KiB of weights
    capacity = 600 * 1024
    devices = resolve_devices([InterpreterBackend(), InterpreterBackend()], {"memory_bytes": capacity})
    plan = partition_function(fn, devices)
    assert [p.device.label for p in plan.partitions] == ["interpreter:0", "interpreter:1"]
    assert all(p.memory_bytes <= capacity for p in plan.partitions)
    order = [n.name for n in schedule(fn)]
    flat = [n.name for p in plan.partitions for n in p.nodes]
    assert flat == order  # contiguous pieces of the schedule
    _assert_dag_in_order(plan)
    assert list(plan.boundaries) == ["act1"]  # cut between two layers: one [1, 256] tensor
    assert plan.partitions[0].boundary_bytes == 1024


def test_the_cut_is_where_the_fewest_bytes_cross(rng):
    _, fn = _mlp_chain(rng)
    order = schedule(fn)
    cut = next(i for i, n in enumerate(order) if n.name == "fc2")
    # After act1 only one [1, 256] tensor is live; inside a layer the MatMul result is too.
    assert crossing_bytes(order, cut) == 1024


def test_a_node_bigger_than_its_device_is_refused_with_the_sizes(rng):
    _, fn = _mlp_chain(rng, layers=1, width=512)  # 1 MiB of weights in one MatMul
    devices = resolve_devices([InterpreterBackend()], {"memory_bytes": 512 * 1024})
    with pytest.raises(PartitionError, match=r"MatMul 'fc0' needs 1\.0 MiB \(\d+ bytes.*holds 512\.0 KiB"):
        partition_function(fn, devices)


def test_devices_without_room_for_every_piece_are_refused(rng):
    _, fn = _mlp_chain(rng)
    devices = resolve_devices([InterpreterBackend()], {"memory_bytes": 600 * 1024})
    with pytest.raises(PartitionError, match=r"need .* in all but its devices hold interpreter 600\.0 KiB"):
        partition_function(fn, devices)


def _island(rng: np.random.Generator, n: int, k: int):
    """tanh -> MatMul [n,k]x[k,k] -> tanh: a MatMul island between element-wise nodes."""
    _m, fn, b = new_function()
    x = b.placeholder("x", [n, k])
    y = b.MatMul(b.Tanh(x, name="pre"), b.constant(_weights(rng, k, k)), name="mm")
    fn.save(b.Tanh(y, name="post"), "out")
    return fn


def test_an_island_whose_transfers_cost_more_than_it_saves_is_merged(rng):
    fn = _island(rng, 2, 8)  # 512 FLOPs: tens of microseconds of hand-over for nothing
    devices = resolve_devices([Restricted(["MatMul"]), InterpreterBackend()])
    plan = partition_function(fn, devices)
    assert [p.device.label for p in plan.partitions] == ["interpreter"]
    kept = partition_function(_island(rng, 2, 8), devices, merge_islands=False)
    assert [p.device.label for p in kept.partitions] == ["interpreter", "acme", "interpreter"]


def test_an_island_that_saves_more_than_its_transfers_stays(rng):
    fn = _island(rng, 64, 512)  # 33.5 MFLOP: 0.7 ms at the default 50 GFLOP/s, 3 us on acme
    devices = resolve_devices([Restricted(["MatMul"]), InterpreterBackend()])
    plan = partition_function(fn, devices)
    assert [p.device.label for p in plan.partitions] == ["interpreter", "acme", "interpreter"]
    assert plan.partitions[1].flops == flops(next(n for n in plan.partitions[1].nodes if n.kind == "MatMul"))
    assert plan.partitions[1].flops == 2 * 64 * 512 * 512


def test_a_backend_cost_hook_overrides_the_roofline(rng):
    class Slow(Restricted):
        def estimate_cost(self, node: Node) -> float:
            return 1.0  # a second per node: never worth it

    fn = _island(rng, 64, 512)
    devices = resolve_devices([Slow(["MatMul"]), InterpreterBackend()])
    assert [p.device.label for p in partition_function(fn, devices).partitions] == ["interpreter"]


def test_nodes_assigned_by_hand_go_where_named_and_stay_there(rng):
    _, fn = _mlp_chain(rng)
    devices = resolve_devices([InterpreterBackend(), Restricted(["MatMul", "Tanh"], name="acme")])
    plan = partition_function(
        fn, devices, by_hand={"fc[23]": "acme", "act2": 1, "act3": "acme", "*[01]": "interpreter"}
    )
    where = {n.name: p.device.label for p in plan.partitions for n in p.nodes}
    assert [where[f"fc{i}"] for i in range(4)] == ["interpreter", "interpreter", "acme", "acme"]
    assert len(plan.partitions) == 2
    _assert_dag_in_order(plan)


@pytest.mark.parametrize(
    ("by_hand", "message"),
    [
        ({"fc9": "acme"}, r"'fc9' matches no node of the optimized graph; close names: \['fc\d'"),
        ({"act*": "acme"}, r"puts Tanh\[float32\] 'act0' on 'acme', which does not run it"),
        ({"fc0": "tpu"}, r"no such device; the devices are \['interpreter', 'acme'\]"),
        ({"fc0": 7}, r"no such device"),
    ],
)
def test_bad_assignments_by_hand_are_refused_by_name(rng, by_hand, message):
    _, fn = _mlp_chain(rng)
    devices = resolve_devices([InterpreterBackend(), Restricted(["MatMul"])])
    with pytest.raises(PartitionError, match=message):
        partition_function(fn, devices, by_hand=by_hand)


def test_a_single_backend_gives_one_partition_with_its_figures(rng):
    _, fn = _mlp_chain(rng, layers=2, width=64)
    plan = partition_function(fn, resolve_devices([InterpreterBackend()]))
    (only,) = plan.partitions
    assert only.constant_bytes == 2 * 64 * 64 * 4
    assert only.boundary_bytes == 0 and not plan.boundaries
    assert only.flops == 2 * (2 * 64 * 64) + 2 * 64
    assert only.as_dict()["nodes"] == 4
    assert "1 partition(s): interpreter 1 (4 nodes)" in plan.summary()


def test_the_support_table_answers_as_is_op_supported_for_views() -> None:
    """The partitioner's table reads a backend's declarations with the same rule as
    ``is_op_supported``: a view (Reshape) needs no declaration, an undeclared operator is
    refused, a declared one runs."""
    from glow_core.partition.support import SupportTable

    _m, _fn, b = new_function()
    x = b.placeholder("x", (2, 6))
    w = b.placeholder("w", (6, 3))
    product = b.MatMul(x, w)
    flat = b.Reshape(product, shape=(6,))
    tanh = b.Tanh(flat)
    b.save(tanh, "y")
    backend = Restricted(("MatMul",))
    (device,) = resolve_devices([backend])
    table = SupportTable([device])
    assert [table.runs(n, device) for n in (product, flat, tanh)] == [True, True, False]
    assert [backend.is_op_supported(n) for n in (product, flat, tanh)] == [True, True, False]
