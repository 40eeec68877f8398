"""Write each input into its slab of dest along axis."""

from ..kinds import every_kind

KIND = "Concat"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, inputs, *, axis):
    axis %= dest.ndim
    offset = 0
    for part in inputs:
        size = part.shape[axis]
        index = (slice(None),) * axis + (slice(offset, offset + size),)
        dest[index] = part
        offset += size
