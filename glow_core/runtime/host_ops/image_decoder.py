"""ImageDecoder on the host: encoded image bytes to pixels, with Pillow (an optional extra)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from onnx import TensorProto

from glow_core.errors import InputError, UnsupportedOpError
from glow_core.runtime.host_ops.table import HostNode, Prepared, host_op

IMAGES_EXTRA = "glow-core[images]"
"""The optional dependency set that brings the image library ImageDecoder needs."""

_PIXEL_FORMATS = {"RGB": ("RGB", 3), "BGR": ("RGB", 3), "Grayscale": ("L", 1)}


def _pillow() -> Any:
    """The PIL.Image module, or a refusal that names the extra to install."""
    try:
        from PIL import Image
    except ImportError:
        raise UnsupportedOpError(
            "ImageDecoder needs the Pillow image library, an optional dependency of glow: "
            f"pip install '{IMAGES_EXTRA}'"
        ) from None
    return Image


@host_op("ImageDecoder")
def _image_decoder(node: HostNode) -> Prepared:
    """An encoded image (uint8 bytes of BMP, JPEG, JPEG 2000, PNG, PNM, TIFF, WebP) as [H, W, C].

    Decoded by Pillow, whose JPEG decoder is libjpeg-turbo with the "fancy" chroma upsampling
    ONNX specifies. Data that cannot be decoded gives an empty [0, 0, C] image, as the ONNX
    definition says.
    """
    pixel_format = node.attr("pixel_format", "RGB")
    if pixel_format not in _PIXEL_FORMATS:
        raise node.refuse(f"pixel_format {pixel_format!r} is not one of {sorted(_PIXEL_FORMATS)}")
    mode, channels = _PIXEL_FORMATS[pixel_format]
    image_module = _pillow()

    def run(inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        data = inputs[0]
        if data is None:
            raise node.refuse("required input 0 is missing")
        if data.dtype != np.uint8:
            raise InputError(f"ONNX node {node.name!r} (ImageDecoder) takes uint8 bytes, got {data.dtype}")
        try:
            with image_module.open(io.BytesIO(data.tobytes())) as image:
                pixels = np.asarray(image.convert(mode), dtype=np.uint8)
        except (OSError, ValueError, SyntaxError, image_module.DecompressionBombError):
            return [np.zeros((0, 0, channels), np.uint8)]
        pixels = pixels.reshape(pixels.shape[0], pixels.shape[1], channels)
        if pixel_format == "BGR":
            pixels = pixels[:, :, ::-1]
        return [np.ascontiguousarray(pixels)]

    return Prepared(run, (TensorProto.UINT8,))
