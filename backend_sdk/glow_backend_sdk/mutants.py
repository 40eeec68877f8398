"""Realistic kernel bugs, each a one-place edit of a template kernel: the suite's own test.

``glow conformance --self-test`` renders the template, plants each mutant alone into its
kernel and runs the conformance cases of that kernel's primitive; a mutant the suite does
not catch is an escape, named in the report. Each models a slip a kernel author makes (the
``bug`` says which); none is a contrived edit no one would write. The edits are text
replacements of the template's kernels, so a template change that removes the text makes
the mutant fail loudly (``Mutant.apply``) instead of silently testing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from glow_core.errors import GlowError


@dataclass(frozen=True)
class Mutant:
    """``old`` replaced by ``new`` in the template kernel ``kernel`` (a file name)."""

    name: str
    kernel: str
    old: str
    new: str
    bug: str

    def apply(self, source: str) -> str:
        """The kernel's source with the bug planted; a GlowError when the text is not there once."""
        found = source.count(self.old)
        if found != 1:
            raise GlowError(
                f"mutant {self.name!r}: its text occurs {found} times in kernels/{self.kernel} "
                "(the template changed): update the mutant in glow_backend_sdk/mutants.py"
            )
        return source.replace(self.old, self.new)


def _m(name: str, kernel: str, old: str, new: str, bug: str) -> Mutant:
    return Mutant(name, kernel, old, new, bug)


MUTANTS: tuple[Mutant, ...] = (
    # ---- special values: NaN, infinities, the sign of zero, overflow -------------------
    _m("max-drops-nan", "max.py", "np.maximum(", "np.fmax(", "a maximum returning the number beside a NaN"),
    _m("min-drops-nan", "min.py", "np.minimum(", "np.fmin(", "a minimum returning the number beside a NaN"),
    _m(
        "reducemax-skips-nan",
        "reducemax.py",
        "np.max(input,",
        "np.nanmax(input,",
        "a max reduction that skips NaN (a > best never takes it)",
    ),
    _m(
        "argmax-nan-loses",
        "argmax.py",
        "    axis %= input.ndim\n",
        "    axis %= input.ndim\n    if input.dtype.kind == 'f':\n"
        "        input = np.where(np.isnan(input), -np.inf, input)\n",
        "an argmax whose comparison never picks NaN",
    ),
    _m(
        "compare-lt-nan-true",
        "compare.py",
        '"lt": np.less,',
        '"lt": lambda a, b: ~np.greater_equal(a, b),',
        "less-than computed as not greater-or-equal: NaN compares true",
    ),
    _m(
        "exp-saturates",
        "exp.py",
        "np.exp(input, out=dest)",
        "np.exp(np.minimum(input, 80), out=dest)",
        "exp clamps its argument to stay finite instead of overflowing to inf",
    ),
    _m(
        "mul-saturates",
        "mul.py",
        "np.multiply(lhs, rhs, out=dest)",
        "np.multiply(lhs, rhs, out=dest)\n    if dest.dtype.kind == 'f':\n"
        "        np.nan_to_num(dest, copy=False, nan=np.nan)",
        "a float product saturated to the largest finite value instead of inf",
    ),
    _m(
        "tanh-through-exp",
        "tanh.py",
        "np.tanh(input, out=dest)",
        "e = np.exp(2 * input.astype(np.float64))\n    dest[...] = (e - 1) / (e + 1)",
        "tanh as (e^2x - 1) / (e^2x + 1): inf / inf is NaN for large x",
    ),
    _m(
        "sqrt-clamps-negatives",
        "sqrt.py",
        "np.sqrt(input, out=dest)",
        "np.sqrt(np.maximum(input, 0), out=dest)",
        "sqrt of max(x, 0): a negative input gives 0, not NaN",
    ),
    _m(
        "log-epsilon-guard",
        "log.py",
        "np.log(input, out=dest)",
        "np.log(np.maximum(input, 1e-30), out=dest)",
        "log guarded by an epsilon: log(0) is finite instead of -inf",
    ),
    _m(
        "pow-through-exp-log",
        "pow.py",
        "np.power(lhs, rhs, out=dest)",
        "dest[...] = np.exp(rhs.astype(np.float64) * np.log(lhs.astype(np.float64)))",
        "pow as exp(y log x): wrong for infinite, zero and negative bases",
    ),
    _m(
        "floor-through-int",
        "floor.py",
        "np.floor(input, out=dest)",
        "dest[...] = np.floor(input).astype(np.int64)",
        "floor through an integer: loses -0.0, NaN and values past 2**63",
    ),
    _m(
        "transpose-adds-zero",
        "transpose.py",
        "input.transpose(shuffle)",
        "input.transpose(shuffle) + 0",
        "a copy through arithmetic (x + 0): -0.0 becomes +0.0",
    ),
    _m(
        "broadcast-adds-zero",
        "broadcast.py",
        "np.broadcast_to(input, dest.shape)",
        "np.broadcast_to(input, dest.shape) + 0",
        "a broadcast through arithmetic (x + 0): -0.0 becomes +0.0",
    ),
    # ---- integer exactness: float paths, wrap-around -------------------------------------
    _m(
        "reducesum-int-through-float32",
        "reducesum.py",
        "np.sum(widened(input),",
        "np.sum(widened(input).astype(np.float32),",
        "an integer sum accumulated in float32 (exact only below 2**24)",
    ),
    _m(
        "reducesum-int-through-float64",
        "reducesum.py",
        "np.sum(widened(input),",
        "np.sum(widened(input).astype(np.float64),",
        "an integer sum accumulated in float64 (exact only below 2**53)",
    ),
    _m(
        "cumsum-int-through-float32",
        "cumreduce.py",
        "    x = widened(input)\n",
        "    x = widened(input)\n    if x.dtype.kind in 'iu':\n        x = x.astype(np.float32)\n",
        "a running integer sum kept in float32",
    ),
    _m(
        "add-int-through-float64",
        "add.py",
        "np.add(lhs, rhs, out=dest)",
        "dest[...] = lhs.astype(np.float64) + rhs.astype(np.float64)",
        "an addition of integers done in float64 (exact only below 2**53, no wrap-around)",
    ),
    _m(
        "mul-int-through-float64",
        "mul.py",
        "np.multiply(lhs, rhs, out=dest)",
        "dest[...] = lhs.astype(np.float64) * rhs.astype(np.float64)",
        "a product of integers done in float64",
    ),
    _m(
        "div-int-through-float32",
        "div.py",
        "quotient = np.floor_divide(lhs, rhs)",
        "quotient = np.floor_divide(lhs.astype(np.float32), rhs.astype(np.float32)).astype(lhs.dtype)",
        "an integer division through float32 (exact only below 2**24)",
    ),
    _m(
        "div-floors",
        "div.py",
        "        quotient += (np.fmod(lhs, rhs) != 0) & ((lhs < 0) != (rhs < 0))\n",
        "",
        "integer division rounding down instead of toward zero",
    ),
    _m(
        "convert-rounds",
        "convert.py",
        "dest[...] = input.astype(dest.dtype)",
        "dest[...] = (np.rint(input) if input.dtype.kind == 'f' else input).astype(dest.dtype)",
        "float to integer conversion rounding to nearest instead of truncating",
    ),
    _m(
        "convert-int-through-float32",
        "convert.py",
        "dest[...] = input.astype(dest.dtype)",
        "dest[...] = (input.astype(np.float32) if input.dtype.kind in 'iu' else input).astype(dest.dtype)",
        "an integer conversion through float32",
    ),
    # ---- per-axis attributes: wrong axis, stride or pad side -------------------------------
    _m(
        "maxpool-row-stride-for-columns",
        "maxpool.py",
        "j : j + strides[1] * (ow - 1) + 1 : strides[1],",
        "j : j + strides[0] * (ow - 1) + 1 : strides[0],",
        "a pooling kernel using the row stride for the columns",
    ),
    _m(
        "maxpool-symmetric-pads",
        "maxpool.py",
        "(n, channels, height + pads[0] + pads[2], width + pads[1] + pads[3]), lowest, input.dtype",
        "(n, channels, height + 2 * pads[0], width + 2 * pads[1]), lowest, input.dtype",
        "pads read as symmetric: the begin pad used for the end",
    ),
    _m(
        "avgpool-symmetric-pads",
        "avgpool.py",
        "shape = (height + pads[0] + pads[2], width + pads[1] + pads[3])",
        "shape = (height + 2 * pads[0], width + 2 * pads[1])",
        "average pooling reading pads as symmetric",
    ),
    _m(
        "avgpool-row-kernel-for-columns",
        "avgpool.py",
        "        for j in range(kernel[1]):",
        "        for j in range(kernel[0]):",
        "a pooling window as wide as it is tall",
    ),
    _m(
        "conv-dilations-swapped",
        "convolution.py",
        "top, left = i * dilations[0], j * dilations[1]",
        "top, left = i * dilations[1], j * dilations[0]",
        "convolution dilations applied to the wrong axes",
    ),
    _m(
        "conv-symmetric-pads",
        "convolution.py",
        "height + pads[0] + pads[2], width + pads[1] + pads[3]",
        "height + 2 * pads[0], width + 2 * pads[1]",
        "convolution reading pads as symmetric",
    ),
    _m(
        "slice-first-step-everywhere",
        "slice.py",
        "    steps = steps or (1,) * input.ndim\n",
        "    steps = (steps[0],) * input.ndim if steps else (1,) * input.ndim\n",
        "a slice using the first axis's step on every axis",
    ),
    _m(
        "slice-end-minus-one-wraps",
        "slice.py",
        "None if end < 0 else end",
        "end",
        "a negative-step slice whose end -1 (past the front) is read as the last element",
    ),
    _m(
        "concat-negative-axis",
        "concat.py",
        "    axis %= dest.ndim\n",
        "    axis = max(axis, 0)\n",
        "a negative concat axis taken as axis 0",
    ),
    _m(
        "reducesum-sorted-axes-assumed",
        "reducesum.py",
        "axis=axes, keepdims=True",
        "axis=axes[0] if len(axes) == 1 or axes[0] > axes[-1] else axes, keepdims=True",
        "a reduction that handles axes given in descending order as one axis",
    ),
    _m(
        "transpose-inverse-perm",
        "transpose.py",
        "input.transpose(shuffle)",
        "input.transpose(np.argsort(shuffle))",
        "a transpose applying the inverse permutation",
    ),
    _m(
        "broadcast-aligned-at-front",
        "broadcast.py",
        "np.broadcast_to(input, dest.shape)",
        "np.broadcast_to(input.reshape(input.shape + (1,) * (dest.ndim - input.ndim)), dest.shape)",
        "broadcasting with missing dimensions added at the back instead of the front",
    ),
    # ---- edges and indices ---------------------------------------------------------------
    _m(
        "add-stale-last-element",
        "add.py",
        "np.add(lhs, rhs, out=dest)",
        "np.add(lhs.reshape(-1)[:-1], rhs.reshape(-1)[:-1], out=dest.reshape(-1)[:-1])",
        "a loop bound off by one: the last element keeps what the buffer held",
    ),
    _m(
        "gather-no-clamp",
        "gather.py",
        "np.clip(wrapped, 0, max(extent - 1, 0))",
        "np.where(wrapped < extent, wrapped, wrapped % max(extent, 1))",
        "out-of-range indices wrapped modulo the extent instead of clamped",
    ),
    _m(
        "gather-no-negative-wrap",
        "gather.py",
        "np.where(indices < 0, indices.astype(np.int64) + extent, indices)",
        "indices",
        "negative indices not counted from the end",
    ),
    _m(
        "avgpool-pads-always-counted",
        "avgpool.py",
        "total / (kernel[0] * kernel[1] if count_include_pad else count)",
        "total / (kernel[0] * kernel[1])",
        "average pooling dividing edge windows by the full kernel size",
    ),
    _m(
        "cumreduce-exclusive-ignored",
        "cumreduce.py",
        "    if exclusive:",
        "    if False:",
        "an exclusive scan computed inclusive",
    ),
)
"""Every planted bug, one at a time; ``--self-test`` must catch each."""
