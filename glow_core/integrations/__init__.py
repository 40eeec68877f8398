"""Glue between glow and the engines users already run models in (docs/bundles.md)."""
