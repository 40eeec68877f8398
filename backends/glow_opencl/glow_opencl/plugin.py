"""The entry point of the glow-opencl plugin."""

from glow_core.plugins import hookimpl


@hookimpl
def glow_backends():
    from glow_opencl.backend import OpenCLBackend  # lazy: a broken pyopencl fails only us

    return [OpenCLBackend]
