"""The console's row page: the row as stored, and ``explain``'s answer
beside it -- the same use case ``board-outbox explain`` prints (``engine/upkeep/explain.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from board_outbox.engine.upkeep.explain import ExplainSettings, explain, explain_row
from board_outbox.model.domain import EffectRow, parse_row_key
from board_outbox.model.errors import InvalidRowKey, MalformedDocument
from board_outbox.model.explanation import Explanation
from board_outbox.ports import Stores
from board_outbox.service.config_sections import Config


@dataclass
class RowPage:
    row: EffectRow | None  # None: the stored document does not decode (``x`` says why)
    x: Explanation
    doc: str  # the row as JSON, for the page's "Document" section ("" when it does not decode)


def settings_of(config: Config) -> ExplainSettings:
    return ExplainSettings(worker=config.worker, limits=config.limits,
                           membership=config.membership, retention=config.retention)


async def row_page(stores: Stores, config: Config, key: str, now: float) -> RowPage | str:
    """The row page of ``key``, or why there is none (not a row key; no such row)."""
    try:
        parse_row_key(key)
    except InvalidRowKey as exc:
        return str(exc)
    settings = settings_of(config)
    try:
        row = await stores.outbox.get(key)
    except MalformedDocument:  # explained as such, on its own page: it costs only itself
        return RowPage(row=None, x=await explain(stores, key, now, settings), doc="")
    if row is None:
        return f"No effect row has the key {key!r}."
    doc = msgspec.json.format(msgspec.json.encode(row), indent=2).decode()
    return RowPage(row=row, x=await explain_row(stores, row, now, settings), doc=doc)
