"""Change element kind (float to int truncates toward zero)."""

from ..kinds import every_kind

KIND = "Convert"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, elem):
    dest[...] = input.astype(dest.dtype)
