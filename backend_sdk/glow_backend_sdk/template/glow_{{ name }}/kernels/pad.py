"""Fill dest with value, then copy input into its interior (pads: all begins, then all ends)."""

KIND = "Pad"
ELEMENT_KINDS = ("float32", "int32", "int64")


def run(dest, input, *, pads, value):
    dest.fill(value)
    rank = input.ndim
    interior = tuple(slice(pads[i], pads[i] + input.shape[i]) for i in range(rank))
    dest[interior] = input
