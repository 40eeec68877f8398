"""AVX-512 GEMMs that read B (the activation) in place instead of packing it, and pack one
column panel at a time where B is in cache (``gemm._in_place_avx512``,
``gemm_tile._prefetches_b`` for far rows, ``gemm._panels_per_group``): before ("packed":
every run-time B read by more than one row panel copied in groups of six panels) and after,
round-robin beside onnxruntime in one process (``model_ab``; docs/performance.md,
"MobileNetV2's projections read their input in place on AVX-512").

    .venv/bin/python bench/b_in_place_ab.py [--batch 8] [--runs 100]
    .venv/bin/python bench/b_in_place_ab.py --model mobilenetv2 [--batch 8] [--runs 40] [--after-first]

``--switch`` picks what "before" turns off: ``all`` (the default), ``far-prefetch`` (only the
next-panel prefetch of far rows read in place; those products then read B in place without
it) or ``one-panel`` (only the one-panel packing). On an AVX2 target both builds are the
same code. Inside a model, read the per-instruction table in both compile orders
(``--after-first``): whole runs carry a placement bias of 1-2% for the build compiled first.
"""

from __future__ import annotations

import contextlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "backends", "glow_cpu", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import model_ab

# (n, c, h, w, cout, k, stride, pad, group): MobileNetV2's projections by plane
LAYERS = [
    (1, 384, 14, 14, 64, 1, 1, 0, 1),  # features.8-10/conv3: rows 784 bytes apart, 8 row panels
    (1, 576, 14, 14, 96, 1, 1, 0, 1),  # features.12-13/conv3: 12 row panels
    (1, 960, 7, 7, 160, 1, 1, 0, 1),  # features.15-16/conv3: 20 row panels
    (1, 192, 28, 28, 32, 1, 1, 0, 1),  # features.5-6/conv3: far rows, 4 row panels, prefetched
    (1, 32, 112, 112, 16, 1, 1, 0, 1),  # features.1/conv3: 32 k, 2 row panels
    (1, 144, 56, 56, 24, 1, 1, 0, 1),  # features.3/conv3: packed, one panel at a time at batch 1
]


def _switch() -> str:
    """``--switch`` from the command line, removed from it (``model_ab`` parses the rest)."""
    if "--switch" not in sys.argv:
        return "all"
    at = sys.argv.index("--switch")
    value = sys.argv[at + 1]
    del sys.argv[at : at + 2]
    if value not in ("all", "far-prefetch", "one-panel"):
        raise SystemExit(f"--switch must be all, far-prefetch or one-panel, got {value!r}")
    return value


SWITCH = _switch()


@contextlib.contextmanager
def switched_off():
    """The rules of ``SWITCH`` off while compiling inside."""
    from glow_cpu.kernels import gemm
    from glow_cpu.kernels.gemm_shape import Gemm

    saved = gemm._in_place_avx512, Gemm.b_far_rows_in_place, gemm.ONE_PANEL_FROM_CACHE
    if SWITCH == "all":
        gemm._in_place_avx512 = lambda g, m_panels: False
    if SWITCH in ("all", "far-prefetch"):
        Gemm.b_far_rows_in_place = property(lambda self: False)
    if SWITCH in ("all", "one-panel"):
        gemm.ONE_PANEL_FROM_CACHE = False
    try:
        yield
    finally:
        gemm._in_place_avx512, Gemm.b_far_rows_in_place, gemm.ONE_PANEL_FROM_CACHE = saved


def pointwise(model) -> set[str]:
    """The names of ``model``'s 1x1 convolutions that are not depthwise."""
    return model_ab.conv_names(
        model, lambda attributes: attributes.get("kernel_shape") == [1, 1] and attributes.get("group", 1) == 1
    )


def main() -> None:
    model_ab.layers_or_model_cli(__doc__, LAYERS, switched_off, pointwise, "1x1 convolutions")


if __name__ == "__main__":
    main()
