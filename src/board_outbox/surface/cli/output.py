"""What the commands show the operator: the dead-letter table, the purge prompt, usage errors."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import msgspec

from board_outbox.model.errors import MalformedDocument, UsageError
from board_outbox.model.times import when

__all__ = ["UsageError", "confirm_bulk_replay", "confirm_purge", "print_dead_letters",
           "print_json", "print_row", "print_unreadable"]


def print_json(obj: Any) -> None:
    """One JSON document (a record or a report: ``--json``), indented, on stdout."""
    print(msgspec.json.format(msgspec.json.encode(obj), indent=2).decode())


def print_dead_letters(rows: Sequence[Any]) -> None:
    if not rows:
        print("no dead-letters")
        return
    print(f"{'PARKED (UTC)':20} {'TENANT':14} {'SEQ':>7} {'KIND':10} {'ATTEMPTS':>8}  ROW_KEY / LAST ERROR")
    for r in rows:
        parked = when(r.updated_at, fmt="%Y-%m-%d %H:%M:%S")
        err = r.errors[-1].error if r.errors else ""
        print(f"{parked:20} {r.tenant_id[:14]:14} {r.seq:>7} {r.kind[:10]:10} {r.attempts:>8}  "
              f"{r.row_key}\n{'':64}{err[:100]}")
    print(f"{len(rows)} dead-letters")


def print_row(row: Any) -> None:
    """One row (``dead-letters show``) for a person: what it is, where it stands, its event,
    its error history and audit (``--json`` prints the stored row whole)."""
    target = f"subscription {row.sub_id}" if row.sub_id else f"projection {row.projection}"
    print(f"row {row.row_key}: {row.kind} of {target}, tenant {row.tenant_id}, seq {row.seq}")
    print(f"  state {row.state}, attempts {row.attempts}"
          + (f", outcome {row.outcome}" if row.outcome else "")
          + f", updated {when(row.updated_at)}"
          + (f", waiting on: {row.waiting}" if row.waiting else ""))
    ev = row.event
    if ev is not None:
        labels = f", labels {', '.join(ev.labels)}" if ev.labels else ""
        print(f"  event {ev.type} of card {ev.card_id} at {when(ev.at) if ev.at else '?'}"
              f"{', column ' + ev.column if ev.column else ''}{labels}"
              + (f", by {ev.actor}" if ev.actor else ""))
    print(f"  errors ({len(row.errors)}):" if row.errors else "  errors: none")
    for e in row.errors:
        print(f"    #{e.attempt} {when(e.at)} {e.kind}: {e.error}")
    if row.audit:
        print("  audit:")
        for a in row.audit:
            print(f"    {when(a.at)} {a.action} by {a.by or '?'}"
                  + (f": {a.detail}" if a.detail else ""))
    if row.trace is not None:
        print(f"  trace {row.trace.traceparent}")
    print(f"(`board-outbox explain {row.row_key}` says why it waits; --json prints the row)")


def print_unreadable(bad: Sequence[MalformedDocument], *, file: Any = None) -> None:
    """The matching rows a listing left out because they do not decode (R1, R7): each named,
    with why, one line each; ``explain KEY`` explains one."""
    if not bad:
        return
    out = sys.stdout if file is None else file
    one = len(bad) == 1
    print(f"{len(bad)} more matching row{'' if one else 's'} {'does' if one else 'do'} not decode "
          f"and {'is' if one else 'are'} left out (`board-outbox explain KEY` says why):",
          file=out)
    for exc in bad:
        print(f"  {exc.ref}: {exc.detail}", file=out)


def confirm_purge(count: int) -> bool:
    """Ask on the terminal before deleting ``count`` dead-letters; no terminal: a usage error."""
    if not sys.stdin.isatty():
        raise UsageError(f"dead-letters purge: {count} rows match; confirm with --yes "
                         "(standard input is not a terminal to ask on)")
    answer = input(f"Delete {count} dead-letters for good? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def confirm_bulk_replay(count: int, rate: float) -> bool:
    """Ask on the terminal before a bulk replay; no terminal: a usage error (as ``purge``)."""
    return confirm_bulk("dead-letters replay", f"Replay {count} dead-letters", count, rate)


def confirm_bulk(command: str, question: str, count: int, rate: float) -> bool:
    """Ask on the terminal before a bulk action (``question`` at ``rate`` rows/s?); no
    terminal: a usage error naming ``command``."""
    if not sys.stdin.isatty():
        raise UsageError(f"{command}: {count} rows match; apply the plan with --yes "
                         "(standard input is not a terminal to ask on), or --dry-run")
    answer = input(f"{question} at {rate:g} rows/s? [y/N] ").strip().lower()
    return answer in ("y", "yes")
