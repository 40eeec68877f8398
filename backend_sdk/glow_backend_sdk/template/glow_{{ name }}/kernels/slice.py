"""dest = input[starts:ends:steps] per dim; an end of -1 with a negative step means 'past the front'."""

from ..kinds import every_kind

KIND = "Slice"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, starts, ends, steps):
    steps = steps or (1,) * input.ndim
    index = tuple(
        slice(start, None if end < 0 else end, step)
        for start, end, step in zip(starts, ends, steps, strict=True)
    )
    dest[...] = input[index]
