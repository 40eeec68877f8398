"""Heterogeneous execution: split an optimized function across an ordered list of backends.

One job per module: ``devices`` (the caller's list -> Devices with options), ``support``
(which device runs each node, after its lowering), ``manual`` (assignment by hand),
``dag`` (cycle-free grouping), ``cost`` (island merging), ``memory`` (split and place by
device memory), ``plan`` (the data), ``partitioner`` (the phases in order), ``draw``
(text, DOT and SVG pictures). The runtime compiles and runs a plan
(``glow_core.runtime.partitioned``).
"""

from glow_core.partition.devices import resolve_devices, split_backend_list
from glow_core.partition.manual import Assignment
from glow_core.partition.partitioner import partition_function
from glow_core.partition.plan import Boundary, Device, Partition, PartitionPlan

__all__ = [
    "Assignment",
    "Boundary",
    "Device",
    "Partition",
    "PartitionPlan",
    "partition_function",
    "resolve_devices",
    "split_backend_list",
]
