"""What the commands show the operator: the dead-letter table, the purge prompt, usage errors."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from board_outbox.model.errors import UsageError

__all__ = ["UsageError", "confirm_bulk_replay", "confirm_purge", "print_dead_letters"]



def print_dead_letters(rows: Sequence[Any]) -> None:
    if not rows:
        print("no dead-letters")
        return
    print(f"{'PARKED (UTC)':20} {'TENANT':14} {'SEQ':>7} {'KIND':10} {'ATTEMPTS':>8}  ROW_KEY / LAST ERROR")
    for r in rows:
        when = datetime.fromtimestamp(r.updated_at, UTC).strftime("%Y-%m-%d %H:%M:%S")
        err = r.errors[-1].error if r.errors else ""
        print(f"{when:20} {r.tenant_id[:14]:14} {r.seq:>7} {r.kind[:10]:10} {r.attempts:>8}  "
              f"{r.row_key}\n{'':64}{err[:100]}")
    print(f"{len(rows)} dead-letters")


def confirm_purge(count: int) -> bool:
    """Ask on the terminal before deleting ``count`` dead-letters; no terminal: a usage error."""
    if not sys.stdin.isatty():
        raise UsageError(f"dead-letters purge: {count} rows match; confirm with --yes "
                         "(standard input is not a terminal to ask on)")
    answer = input(f"Delete {count} dead-letters for good? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def confirm_bulk_replay(count: int, rate: float) -> bool:
    """Ask on the terminal before a bulk replay; no terminal: a usage error (as ``purge``)."""
    if not sys.stdin.isatty():
        raise UsageError(f"dead-letters replay: {count} rows match; apply the plan with --yes "
                         "(standard input is not a terminal to ask on), or --dry-run")
    answer = input(f"Replay {count} dead-letters at {rate:g} rows/s? [y/N] ").strip().lower()
    return answer in ("y", "yes")
