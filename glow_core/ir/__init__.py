"""The address-only instruction IR: instructions, IRGen, IR optimizations, memory planning."""

from glow_core.ir.instructions import IRFunction
from glow_core.ir.ir_passes import DEFAULT_IR_PIPELINE, IR_PASSES, optimize_ir
from glow_core.ir.irgen import generate_ir
from glow_core.ir.memory import MemoryPlan, check_plan, plan_memory
from glow_core.ir.verifier import verify_ir

__all__ = [
    "DEFAULT_IR_PIPELINE",
    "IR_PASSES",
    "IRFunction",
    "MemoryPlan",
    "check_plan",
    "generate_ir",
    "optimize_ir",
    "plan_memory",
    "verify_ir",
]
