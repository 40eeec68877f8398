"""``python -m glow_conformance --backend NAME``: the same as ``glow conformance``."""

import sys

from glow_conformance.cli import main

sys.exit(main())
