"""``board-outbox explain ROW_KEY [--json]``: the row's timeline and what holds it now, by name
(``engine/upkeep/explain.py``). A text that is not a row key, or a key no row has, is one line and
exit 2; ``--json`` prints the ``Explanation`` as one stable document (schema 1)."""

from __future__ import annotations

import argparse
import time

import msgspec

from board_outbox.model.errors import InvalidRowKey, RowNotFound, UsageError
from board_outbox.model.explanation import DeadLettered, Explanation, Limit
from board_outbox.model.retention import days
from board_outbox.model.times import when
from board_outbox.surface.cli.commands import StoresFactory


async def cmd_explain(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.engine.upkeep.explain import ExplainSettings, explain
    from board_outbox.model.row_keys import parse_row_key
    from board_outbox.service.config import load_config

    try:
        parse_row_key(args.row_key)  # before the configuration and the store: a typo costs nothing
    except InvalidRowKey as exc:
        raise UsageError(f"explain: {exc}") from None
    cfg = load_config(args.config)
    settings = ExplainSettings(worker=cfg.worker, limits=cfg.limits, membership=cfg.membership,
                               retention=cfg.retention)
    async with factory(cfg) as stores:
        try:
            x = await explain(stores, args.row_key, time.time(), settings)
        except RowNotFound as exc:
            raise UsageError(f"explain: {exc} (done rows are deleted "
                             f"{days(cfg.retention.done_seconds)}: [retention] done_seconds; "
                             "`dead-letters list` names the dead-letters)") from None
    if args.json:
        print(msgspec.json.encode(x).decode())
    else:
        print("\n".join(lines(x)))
    return 0


def _when(at: float | None) -> str:
    return when(at, fmt="%Y-%m-%d %H:%M:%S.%f", ms=True, none="-" + " " * 22)


def lines(x: Explanation) -> list[str]:
    """The explanation for a person: the row, its holds, its timeline (UTC), the notes."""
    out = []
    r = x.row
    if r is None:
        out.append(f"row {x.row_key}: the stored document does not decode")
    else:
        target = f" of {r.target}" if r.target else ""
        out.append(f"row {x.row_key}: {r.kind}{target}, tenant {r.tenant_id}, seq {r.seq}"
                   + (f", priority {r.priority}" if r.priority else ""))
        out.append(f"  state {r.state}, attempts {r.attempts} of {r.max_attempts}"
                   + (f", waiting on: {r.waiting}" if r.waiting else ""))
    out.append("holds:" if x.holds else "holds: none")
    for h in x.holds:
        out.append(f"  {h.name:<14} {h.summary}")
        if isinstance(h, Limit):
            for holder in h.holders[:20]:
                out.append(f"  {'':<14}   held by {holder.holder} until {_when(holder.until)}")
            if len(h.holders) > 20:
                out.append(f"  {'':<14}   ... and {len(h.holders) - 20} more")
        elif isinstance(h, DeadLettered):
            out.append(f"  {'':<14}   replay: {h.replay}")
    if x.timeline:
        out.append("timeline (UTC):")
        for m in x.timeline:
            attempt = f" #{m.attempt}" if m.attempt is not None else ""
            out.append(f"  {_when(m.at)}  {m.what + attempt:<18} {m.detail}")
    if x.notes:
        out.append("notes:")
        out += [f"  - {n}" for n in x.notes]
    return out
