"""Channel counts per group of a grouped convolution, shared by the float and int8 kernels'
shape records (``conv.Geometry``, ``int8_shape.Geometry``)."""

from __future__ import annotations


class ChannelGroups:
    """A mixin for a frozen shape record with fields ``c`` (input channels), ``cout`` and
    ``group``: each group convolves ``cin_g`` input channels into ``cout_g`` outputs."""

    c: int
    cout: int
    group: int

    @property
    def cin_g(self) -> int:
        return self.c // self.group

    @property
    def cout_g(self) -> int:
        return self.cout // self.group
