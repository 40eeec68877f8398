"""Element-wise math beyond ``elementwise.py``: Floor, Sin, Cos, Atan.

Each is here because no exact lowering exists: Ceil, Round, Mod and integer-valued casts
need Floor; Tan is Sin/Cos; Asin, Acos and the other inverse trigonometric functions are
Atan of an algebraic expression. Everything else (Sinh, Asinh, Softplus...) lowers to Exp
and Log, which the core already has.
"""

from __future__ import annotations

import numpy as np

from glow_core.primitives.elementwise import _unary

Floor = _unary("Floor", "Element-wise largest integer not greater than x (float kinds).", np.floor)
Sin = _unary("Sin", "Element-wise sine (radians).", np.sin, core=False)
Cos = _unary("Cos", "Element-wise cosine (radians).", np.cos, core=False)
Atan = _unary("Atan", "Element-wise arc tangent, in (-pi/2, pi/2).", np.arctan, core=False)
