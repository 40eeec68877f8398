"""Change element kind (float to int truncates toward zero)."""

KIND = "Convert"
ELEMENT_KINDS = ("float32", "int32", "int64", "bool")


def run(dest, input, *, elem):
    dest[...] = input.astype(dest.dtype)
