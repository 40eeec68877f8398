"""Write each input into its slab of dest along axis."""

KIND = "Concat"
ELEMENT_KINDS = ("float32", "int32", "int64", "bool")


def run(dest, inputs, *, axis):
    axis %= dest.ndim
    offset = 0
    for part in inputs:
        size = part.shape[axis]
        index = (slice(None),) * axis + (slice(offset, offset + size),)
        dest[index] = part
        offset += size
