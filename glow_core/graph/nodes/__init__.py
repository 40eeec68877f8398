"""High-level node kinds, one module per family: a declaration plus a lowering into primitives.

A node's semantics *are* its lowering run with the primitives' references, so the math
exists once. Importers build these nodes and only map attributes; a backend may keep a node
(``Backend.should_lower`` False) when it has a fused kernel for it, and everything else
reaches it as primitives. Importing this package registers every node in ``NODES``.
"""

from glow_core.graph.nodes import activation as _activation  # noqa: F401 - registers nodes
from glow_core.graph.nodes import attention as _attention  # noqa: F401 - registers nodes
from glow_core.graph.nodes import convolution as _convolution  # noqa: F401 - registers nodes
from glow_core.graph.nodes import einsum as _einsum  # noqa: F401 - registers nodes
from glow_core.graph.nodes import layers as _layers  # noqa: F401 - registers nodes
from glow_core.graph.nodes import normalization as _normalization  # noqa: F401 - registers nodes
from glow_core.graph.nodes import pooling as _pooling  # noqa: F401 - registers nodes
from glow_core.graph.nodes import quantized as _quantized  # noqa: F401 - registers nodes
from glow_core.graph.nodes import recurrent as _recurrent  # noqa: F401 - registers nodes
from glow_core.graph.nodes import resize as _resize  # noqa: F401 - registers nodes
