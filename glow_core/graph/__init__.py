"""The high-level graph IR: Module > Function > Node, storage, builder, checks, dumps."""

from glow_core.graph.builder import Builder
from glow_core.graph.function import Function, Module
from glow_core.graph.node import Constant, Node, Placeholder

__all__ = ["Builder", "Constant", "Function", "Module", "Node", "Placeholder"]
