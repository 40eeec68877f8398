"""Frontends: importers that turn models in foreign formats into glow graphs.

Each format lives in its own subpackage (``glow_core.frontends.onnx``) so importing glow
never pulls in a format library the user does not need.
"""
