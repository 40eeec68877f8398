"""Ahead-of-time bundles: a compiled model as an object file, a C header, a weights file and
a manifest (docs/bundles.md). ``bundle`` writes one; ``load_bundle`` runs one from Python."""

from glow_core.bundles.load import BundleFunction, LoadedBundle, load_bundle
from glow_core.bundles.manifest import EntryPoint, Manifest, TensorSlot
from glow_core.bundles.write import bundle

__all__ = ["BundleFunction", "EntryPoint", "LoadedBundle", "Manifest", "TensorSlot", "bundle", "load_bundle"]
