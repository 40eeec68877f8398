"""dest dim i = input dim shuffle[i]."""

from ..kinds import every_kind

KIND = "Transpose"
ELEMENT_KINDS = every_kind(KIND)


def run(dest, input, *, shuffle):
    dest[...] = input.transpose(shuffle)
