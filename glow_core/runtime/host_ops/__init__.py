"""The ONNX ops glow runs on the host, in numpy: string tensors and encoded images.

glow's element kinds and IR are numeric (every tensor has a fixed-size element a backend
can hold in its arena), so a string tensor cannot reach compiled code, and decoding an
image (``ImageDecoder``) is a library call whose output shape depends on the data. These
ops run per call on the host instead (``glow_core.runtime.host`` splits a model between
the host and a compiled device part). ``table.py`` holds the declarations and the lookup;
importing this package registers every op family.

String tensors are numpy object arrays of ``str`` on the way in and out
(``glow_core.frontends.onnx.string_values``).
"""

from __future__ import annotations

from glow_core.runtime.host_ops import image_decoder, label_encoder, strings  # noqa: F401 - register ops
from glow_core.runtime.host_ops.image_decoder import IMAGES_EXTRA
from glow_core.runtime.host_ops.strings import re2_to_python
from glow_core.runtime.host_ops.table import (
    HOST_OPS,
    HostNode,
    HostOp,
    Prepared,
    always_host,
    decode_attributes,
    host_op,
    host_op_for,
    host_op_names,
)

__all__ = [
    "HOST_OPS",
    "IMAGES_EXTRA",
    "HostNode",
    "HostOp",
    "Prepared",
    "always_host",
    "decode_attributes",
    "host_op",
    "host_op_for",
    "host_op_names",
    "re2_to_python",
]
