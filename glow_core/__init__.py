"""glow-core: a neural-network compiler after Glow (graph lowering).

Importing the package registers every primitive and high-level node declaration, so the
registries (``PRIMITIVES``, ``NODES``) are complete for every layer that reads them.
"""

from glow_core import primitives as _primitives  # noqa: F401 - registers primitives
from glow_core.bundles import bundle, load_bundle
from glow_core.errors import GlowError
from glow_core.graph import Builder, Function, Module
from glow_core.graph import nodes as _nodes  # noqa: F401 - registers high-level nodes
from glow_core.graph.parser import parse_function
from glow_core.ir.parser import parse_ir
from glow_core.limits import MemoryLimits, memory_limits
from glow_core.quantization import Profile, Quantize, profile
from glow_core.runtime import CompiledFunction, Session, compile, load
from glow_core.spec import NODES, PRIMITIVES
from glow_core.training import SGD, Adam, Trainer, TrainingFunction, differentiate
from glow_core.types import ElemKind, Type

__version__ = "0.1.0"

__all__ = [
    "NODES",
    "PRIMITIVES",
    "SGD",
    "Adam",
    "Builder",
    "CompiledFunction",
    "ElemKind",
    "Function",
    "GlowError",
    "MemoryLimits",
    "Module",
    "Profile",
    "Quantize",
    "Session",
    "Trainer",
    "TrainingFunction",
    "Type",
    "__version__",
    "bundle",
    "compile",
    "differentiate",
    "load",
    "load_bundle",
    "memory_limits",
    "parse_function",
    "parse_ir",
    "profile",
]
