"""glow-interpreter: the reference backend; it runs every primitive's numpy reference."""

__version__ = "0.1.0"
