"""The same elements in dest's shape (the compiler normally makes this a view)."""

KIND = "Reshape"
ELEMENT_KINDS = ("float32", "int32", "int64", "bool")


def run(dest, input, *, shape):
    dest[...] = input.reshape(dest.shape)
