"""What a backend is: its declared facts (BackendInfo) and the few methods the core calls.

Support is declared as data (kind -> element kinds) so the core can check a whole function
at compile time and the conformance suite can enumerate what to test; a backend rarely
needs to override ``is_op_supported``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from glow_core.errors import BackendError, BundleError
from glow_core.graph.function import Function
from glow_core.graph.node import Node
from glow_core.types import ElemKind

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from glow_core.bundles.code import BundleCode, BundleRequest
    from glow_core.cache import DiskCache
    from glow_core.ir.instructions import IRFunction
    from glow_core.pipeline.data import Pipeline
    from glow_core.runtime.compiled import CompiledFunction


def selecting_kind(node: Node) -> ElemKind:
    """The element kind support is declared for: the result's, or for operators whose result
    kind is fixed (ArgMax, TopK's indices) the declared operand's."""
    return node.spec.selecting_kind(node.type, [i.type for i in node.inputs])


def declares(node: Node, supports: Mapping[str, Sequence[str]]) -> bool:
    """Whether declared support ``supports`` (``BackendInfo.supports``: element kinds by
    operator kind) covers ``node``: the rule of the default ``Backend.is_op_supported``,
    written once for every reader of a backend's declarations (the support check, the
    partitioner's table). Views are the core's and need no declaration."""
    if node.spec.view:
        return True
    return selecting_kind(node).name in supports.get(node.kind, ())


class BackendInfo(BaseModel):
    """Facts a backend declares about itself; validated, printable, serializable."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="registry name, e.g. 'cpu'")
    version: str
    device: str = Field(description="kind of device: cpu, gpu, reference, ...")
    supports: dict[str, list[str]] = Field(
        description="operator kind -> element kind names it runs (the result's, or the kind_operand's)"
    )
    memory_bytes: int | None = Field(None, description="device memory capacity, None if host memory")
    peak_flops: float | None = Field(
        None, description="peak floating-point operations per second (cost model; None: a default)"
    )
    memory_bandwidth: float | None = Field(
        None, description="device memory bytes per second (cost model; None: a default)"
    )
    transfer_bandwidth: float | None = Field(
        None,
        description="bytes per second between host and device memory (cost model; None: the "
        "device works in host memory and a boundary tensor costs only a hand-over)",
    )
    priority: int = Field(0, description="higher wins when no backend is named")
    options_schema: dict[str, Any] = Field(default_factory=dict)
    xfail: dict[str, str] = Field(default_factory=dict, description="conformance test id -> reason")
    fused_activations: dict[str, list[str]] = Field(
        default_factory=dict,
        description="kept layer kind (Conv, FullyConnected) -> activation node kinds (Relu, Clip) "
        "its kernel applies fused; the fuse-activations pass folds only these",
    )


class BackendOptions(BaseModel):
    """Options every backend accepts; backends subclass this for their own."""

    model_config = ConfigDict(extra="forbid")

    memory_bytes: int | None = Field(None, ge=1)
    """Lower the device's memory capacity to this many bytes (None: what ``info()`` declares).
    The partitioner splits a model so each device's partitions fit; a smaller figure makes
    that split testable on one machine (two ``cpu`` devices of 300 MiB each)."""


class Backend(ABC):
    """Base class of every backend plugin."""

    name: ClassVar[str]
    Options: ClassVar[type[BackendOptions]] = BackendOptions

    @abstractmethod
    def info(self) -> BackendInfo:
        """This backend's declared facts."""

    def is_op_supported(self, node: Node) -> bool:
        """Whether this backend can run ``node`` as it is.

        Support is declared per kind and the element kind that selects the kernel: the
        result's, except for operators whose result kind is fixed (they declare
        ``kind_operand``: ArgMax is keyed by what it reads). Other operand kinds follow from
        the type rule (Gather's indices, Convert's source). Views (Reshape, BitCast) are the
        core's: IRGen gives them their operand's bytes, so every backend runs them undeclared.
        """
        return declares(node, self.info().supports)

    def support_check(self) -> Callable[[Node], bool]:
        """``is_op_supported`` as a function for checking many nodes at once.

        A backend that keeps the default ``is_op_supported`` gets a check that reads
        ``info()`` once, not once per node: a backend may rebuild its info on every call
        (the cpu backend fingerprints its emitter table), and an unrolled recurrence has tens
        of thousands of nodes. Its answers are ``is_op_supported``'s for the backend as it
        is now, so take a fresh one for each check. A backend that overrides
        ``is_op_supported`` gets that method itself.
        """
        if type(self).is_op_supported is not Backend.is_op_supported:
            return self.is_op_supported
        supports = self.info().supports
        return lambda node: declares(node, supports)

    def should_lower(self, node: Node) -> bool:
        """Whether the core should lower this high-level node (False keeps it for a fused kernel)."""
        return True

    def supports_fused_activation(self, layer: Node, activation: Node) -> bool:
        """Whether ``activation`` (a Relu or Clip node) may be folded into ``layer`` (a Conv or
        FullyConnected this backend keeps): read from ``BackendInfo.fused_activations``."""
        if self.should_lower(layer):  # cheap, and the answer for most backends
            return False
        return activation.kind in self.info().fused_activations.get(layer.kind, ())

    def estimate_cost(self, node: Node) -> float:
        """Seconds this backend needs for ``node`` (a node of the optimized graph), for the
        partitioner's cost model. The default is a roofline from the node's FLOPs and the
        bytes it reads and writes, with ``BackendInfo.peak_flops`` and ``memory_bandwidth``
        (or defaults); a backend that knows better (measured kernels) overrides it."""
        from glow_core.partition.cost import roofline_seconds

        return roofline_seconds(node, self.info())

    def transform_post_lowering(self, fn: Function) -> bool:
        """A backend's own graph rewrite after lowering; returns whether it changed ``fn``."""
        return False

    def pipeline(self, default: Pipeline) -> Pipeline:
        """The compile pipeline for this backend: ``default`` with this backend's steps added
        or moved (``default.insert_after("lower/post-lowering", Step(...))``). The runner
        refuses orders that break the levels or drop a required step (docs/pipeline.md)."""
        return default

    def parse_options(self, options: dict[str, Any] | BackendOptions | None) -> BackendOptions:
        """Validate user options against this backend's Options model."""
        if isinstance(options, BackendOptions):
            return options
        try:
            return self.Options(**(options or {}))
        except ValidationError as err:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
            known = ", ".join(self.Options.model_fields) or "none"
            raise BackendError(
                f"bad options for backend {self.name!r}: {problems} (known options: {known})"
            ) from None

    def disk_cache(self) -> DiskCache | None:
        """Where this backend keeps compiled code between processes, with default options
        (``glow cache info|clear``, ``glow backends``); None for a backend that keeps none."""
        return None

    @abstractmethod
    def compile(self, ir: IRFunction, options: BackendOptions) -> CompiledFunction:
        """Code for ``ir`` (its memory plan is ``ir.memory_plan``), ready to run."""

    def bundle(
        self, functions: Mapping[str, IRFunction], options: BackendOptions, request: BundleRequest
    ) -> BundleCode:
        """An ahead-of-time bundle's object code: one C entry point per function (keyed by
        its symbol), as ``glow bundle`` writes it (docs/bundles.md). Only a backend that
        emits native object code can; the others refuse, as this default does."""
        raise BundleError(
            f"backend {self.name!r} cannot write AOT bundles: it emits no native object code; "
            "bundle with a backend that does (--backend cpu)"
        )
