"""The target's vector register file, which sizes the kernels' register tiles.

The kernels compute on 16-lane float vectors (``VECTOR``); LLVM keeps one in a zmm register
on AVX-512, splits it over two ymm registers on AVX/AVX2 and over four q registers on NEON.
A GEMM or convolution tile keeps its accumulators live in registers across the whole
reduction, so the number of accumulators has to fit the file: the AVX-512 tiles (24
accumulators of the 32 zmm) need 48 ymm registers on an AVX2 CPU, which has 16, and spill to
the stack at every step of k (measured on a 3x3 128-channel convolution for Zen 3: 2272
stack moves for 1152 FMAs, about 5x slower than onnxruntime). Every tile size is derived
from the file of the target the code is generated for, which is the host for the JIT and
the requested triple for a bundle.
"""

from __future__ import annotations

from dataclasses import dataclass

from glow_cpu.emit import VECTOR


@dataclass(frozen=True)
class RegisterFile:
    """``registers`` architectural vector registers of ``lanes`` float32 lanes each."""

    registers: int
    lanes: int

    @property
    def accumulators(self) -> int:
        """16-lane accumulators a register tile may keep live: three quarters of the file,
        the rest holding the operands loaded and broadcast at each step (24 of AVX-512's 32
        zmm, 6 on AVX2's 16 ymm, 6 on NEON's 32 q registers)."""
        return max(1, self.registers * self.lanes // VECTOR * 3 // 4)


AVX512 = RegisterFile(registers=32, lanes=16)
AVX2 = RegisterFile(registers=16, lanes=8)
NEON = RegisterFile(registers=32, lanes=4)
SSE = RegisterFile(registers=16, lanes=4)


def sixteen_lane_registers(accumulators: int) -> bool:
    """Whether the target of a kernel whose tiles get ``accumulators`` holds a 16-lane float
    vector in one register (AVX-512's file: a kernel knows its target by that count), so a
    two-input shuffle of 16 lanes is one instruction. Elsewhere a 16 x 16 transpose keeps 32
    ymm halves live in a file of 16 and spills: on AVX2 blocking 16 channels of 16 pixels
    took 464 instructions, 170 of them stack moves; as four 8 x 8 transposes, 245 and none."""
    return accumulators >= AVX512.accumulators


def native_compress(accumulators: int) -> bool:
    """Whether the target of a kernel whose tiles get ``accumulators`` compresses a vector's
    selected lanes in one instruction: AVX-512's ``vcompressps``, which only its file has (a
    kernel knows its target by that count). Elsewhere LLVM expands
    ``llvm.experimental.vector.compress`` lane by lane through the stack: on AVX2 MobileNetV2's
    first convolution (3 -> 32 channels, 3x3 stride 2) took 6.4 ms with its output stored
    compressed, 1.3 ms through scratch and a pass dropping the extra columns (ort 0.8)."""
    return sixteen_lane_registers(accumulators)


_AVX512_CPUS = {
    "x86-64-v4",
    "skylake-avx512",
    "cascadelake",
    "cooperlake",
    "cannonlake",
    "icelake-client",
    "icelake-server",
    "tigerlake",
    "rocketlake",
    "sapphirerapids",
    "emeraldrapids",
    "graniterapids",
    "graniterapids-d",
    "znver4",
    "znver5",
}
"""x86 CPU names LLVM gives AVX-512 (for a bundle named by ``--cpu`` alone, with no features string)."""
_AVX_CPUS = {
    "x86-64-v3",
    "haswell",
    "broadwell",
    "skylake",
    "alderlake",
    "raptorlake",
    "meteorlake",
    "arrowlake",
    "lunarlake",
    "gracemont",
    "znver1",
    "znver2",
    "znver3",
    "sandybridge",
    "ivybridge",
    "btver2",
    "bdver1",
    "bdver2",
    "bdver3",
    "bdver4",
}


_AVX512_VNNI_CPUS = _AVX512_CPUS - {"x86-64-v4", "skylake-avx512", "cannonlake"}
"""x86 CPU names LLVM gives AVX-512 VNNI (``vpdpbusd`` on zmm registers)."""
_AVX_VNNI_CPUS = {"alderlake", "raptorlake", "meteorlake", "arrowlake", "lunarlake", "gracemont"}
"""x86 CPU names LLVM gives AVX-VNNI (``vpdpbusd`` on ymm registers, VEX-encoded) and no AVX-512."""


def vnni_bits(triple: str, features: str, cpu: str = "") -> int:
    """The widest ``vpdpbusd`` (4 u8 x s8 products summed into each int32 lane) the target
    has: 512 (AVX-512 VNNI), 256 (AVX-VNNI alone) or 0 (none: the int8 kernels multiply int16
    pairs, ``kernels/int8_dot.py``). Read like ``register_file``: from the
    ``features`` string, or from the CPU name when that is empty (a bundle for a named CPU)."""
    if not triple.startswith(("x86_64", "i386", "i686")):
        return 0
    enabled = set(features.split(","))
    if not features:
        return 512 if cpu in _AVX512_VNNI_CPUS else 256 if cpu in _AVX_VNNI_CPUS else 0
    if "+avx512vnni" in enabled:
        return 512
    if "+avxvnni" in enabled:
        return 256
    return 0


def register_file(triple: str, features: str, cpu: str = "") -> RegisterFile:
    """The vector register file of ``triple``, from LLVM's ``features`` string (the host's:
    +avx512f, +avx...) or, when that is empty (a bundle for a named CPU), from the CPU name;
    plain x86-64 (``generic``) has SSE2 only."""
    if triple.startswith(("aarch64", "arm64")):
        return NEON
    enabled = set(features.split(","))
    if "+avx512f" in enabled or (not features and cpu in _AVX512_CPUS):
        return AVX512
    if "+avx" in enabled or (not features and cpu in _AVX_CPUS):
        return AVX2
    return SSE
