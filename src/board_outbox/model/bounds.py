"""Number types the settings structs validate with when configuration is decoded into them."""

from __future__ import annotations

from typing import Annotated

import msgspec

Pos = Annotated[float, msgspec.Meta(gt=0)]
PosInt = Annotated[int, msgspec.Meta(gt=0)]
Frac = Annotated[float, msgspec.Meta(ge=0, le=1)]
AtLeastOne = Annotated[float, msgspec.Meta(ge=1)]
