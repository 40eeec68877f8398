"""glow-opencl: shape-specialized OpenCL C kernels for the instruction IR, run with pyopencl."""

__version__ = "0.1.0"
