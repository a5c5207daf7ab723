"""Number types the settings structs validate with when configuration is decoded into them.

Every interval, timeout and lease is bounded on both sides: below a millisecond a
loop spins, beyond a day a setting is a typo (and a lease beyond the stuck-row sweep's horizon
gets parked by another replica). Cross-field rules (lease vs horizon, heartbeat vs lease,
stall vs young gap...) are in ``service/config_rules.validate``."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

MIN_SECONDS: Final = 0.001
MAX_SECONDS: Final = 86400.0
MAX_COUNT: Final = 1_000_000

# seconds: an interval, a timeout or a lease, from 1 ms to one day
Pos = Annotated[float, msgspec.Meta(ge=MIN_SECONDS, le=MAX_SECONDS)]
# a count: a batch size, attempts, ticks
PosInt = Annotated[int, msgspec.Meta(gt=0, le=MAX_COUNT)]
Frac = Annotated[float, msgspec.Meta(ge=0, le=1)]
AtLeastOne = Annotated[float, msgspec.Meta(ge=1, le=100)]
# F2: launches in flight at once (0: no limit), and launches per second (0: no limit; a
# positive rate below MIN_RATE is refused by ``model/limits.rate_problem``)
MAX_SLOTS: Final = 1000
InFlight = Annotated[int, msgspec.Meta(ge=0, le=MAX_SLOTS)]
PerSecond = Annotated[float, msgspec.Meta(ge=0, le=MAX_COUNT)]
# a subscription's priority: higher first within its tenant's fair share (F1)
MIN_PRIORITY: Final = -10
MAX_PRIORITY: Final = 10
Priority = Annotated[int, msgspec.Meta(ge=MIN_PRIORITY, le=MAX_PRIORITY)]
