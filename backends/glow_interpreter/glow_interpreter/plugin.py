"""The entry point of the glow-interpreter plugin."""

from glow_core.plugins import hookimpl


@hookimpl
def glow_backends():
    from glow_interpreter.backend import InterpreterBackend  # lazy: a broken import fails only us

    return [InterpreterBackend]
