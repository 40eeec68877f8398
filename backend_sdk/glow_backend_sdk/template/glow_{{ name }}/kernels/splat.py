"""Fill dest with one value."""

KIND = "Splat"
ELEMENT_KINDS = ("float32", "int32", "int64", "bool")


def run(dest, *, shape, value, elem):
    dest.fill(value)
