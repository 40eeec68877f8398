"""dest dim i = input dim shuffle[i]."""

KIND = "Transpose"
ELEMENT_KINDS = ("float32", "int32", "int64", "bool")


def run(dest, input, *, shuffle):
    dest[...] = input.transpose(shuffle)
