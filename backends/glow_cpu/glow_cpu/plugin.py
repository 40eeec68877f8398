"""The entry point of the glow-cpu plugin."""

from glow_core.plugins import hookimpl


@hookimpl
def glow_backends():
    from glow_cpu.backend import CpuBackend  # lazy: a broken llvmlite fails only this plugin

    return [CpuBackend]
