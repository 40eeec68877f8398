"""glow-conformance: one suite every glow backend plugin runs against itself."""

__version__ = "0.1.0"
