"""glow-backend-sdk: render a new backend plugin and tell a vendor what it can run."""

from pathlib import Path

__version__ = "0.1.0"

TEMPLATE_DIR = Path(__file__).parent / "template"
"""The copier template a new backend is rendered from."""

TEMPLATE_VERSION = "0.3.0"
"""The template's version, the git tag ``copier update`` compares: raise it with every
change to the template (0.2.0: the measured core set, views left to the core; 0.3.0:
``primitives`` narrows the claim, peak figures declared for the partitioner)."""
