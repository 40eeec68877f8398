"""glow-cpu: LLVM code generation with llvmlite; the whole network is one native entry point."""

__version__ = "0.1.0"
