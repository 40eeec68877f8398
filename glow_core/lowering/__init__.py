"""Lowering: replace high-level nodes by the primitives their declarations build.

The rules themselves live with each node's declaration (``glow_core.graph.nodes``); this
package is the driver that applies them, honouring the backend's ``should_lower``.
"""

from glow_core.lowering.lower import lower_function

__all__ = ["lower_function"]
