"""What ``rows find``, the console's search box and the API's row search ask the store (A8): one
``RowQuery`` of one form, each form answered by one query over an index (``docs/scaling.md``).
A leaf: plain values, no I/O."""

from __future__ import annotations

from typing import Final, Literal

import msgspec

__all__ = ["FORMS", "MAX_FIND", "RowQuery"]

MAX_FIND: Final = 10_000  # rows one search returns at most
Form = Literal["card", "event", "seq_range", "row_key", "state"]
FORMS: Final = ("card", "event", "seq_range", "row_key", "state")


class RowQuery(msgspec.Struct, frozen=True, kw_only=True):
    """One search: ``card`` (a tenant's card's rows), ``event`` (one event's rows: ``tenant``,
    ``seq_from`` = ``seq_to``), ``seq_range`` (a tenant's rows of ``seq_from..seq_to``, both
    included), ``row_key`` (one row), ``state`` (the rows in ``state``, of ``tenant`` when
    given). Newest first (by seq; a state's by its index's key), at most ``limit``."""

    form: Form
    tenant: str | None = None
    card: str | None = None
    seq_from: int | None = None
    seq_to: int | None = None
    row_key: str | None = None
    state: str | None = None
    limit: int = 100

    def describe(self) -> str:
        if self.form == "card":
            return f"card {self.card} of tenant {self.tenant}"
        if self.form == "event":
            return f"event {self.tenant}:{self.seq_from}"
        if self.form == "seq_range":
            return f"seqs {self.seq_from}..{self.seq_to} of tenant {self.tenant}"
        if self.form == "row_key":
            return f"row {self.row_key}"
        return f"state {self.state}" + (f" of tenant {self.tenant}" if self.tenant else "")
