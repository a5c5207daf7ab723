"""``board-outbox dead-letters replay --filter KEY=VALUE ...``: bulk replay as a plan. Parses the
filter, prints the plan (``engine.upkeep.bulk_replay.plan_bulk_replay``), asks, then applies it
(``apply_bulk_replay``) with a progress bar, stopping between two rows on SIGINT/SIGTERM.
``rows cancel`` and ``rows rerun`` (A8) take the same steps (``run_bulk``) with their own write."""

from __future__ import annotations

import argparse
import getpass
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import anyio

from board_outbox.model.dead_letters import (
    ABORTED,
    DONE_WORDS,
    NOUNS,
    REPLAY,
    RUN_DONE,
    BulkFilter,
    BulkProgress,
)
from board_outbox.surface.cli.output import UsageError, confirm_bulk, print_json

if TYPE_CHECKING:
    from board_outbox.engine.upkeep.bulk_replay import Stop

EXIT_ABORTED = 130


def bulk_filter(args: argparse.Namespace) -> BulkFilter | None:
    """The bulk replay's filter (None: not a bulk replay), or a ``UsageError``: parsed from the
    ``--filter`` terms and the dead-letters flags before anything is opened."""
    from board_outbox.surface.bulk_filter import default_limit, parse_filter, split_term

    if not args.terms:
        if args.yes or args.rate is not None:
            raise UsageError("dead-letters replay: --yes and --rate go with --filter")
        return None
    if args.row_keys or args.all:
        raise UsageError("dead-letters replay: give ROW_KEY(s), --all or --filter, one of them")
    pairs = [split_term(t) for t in args.terms]
    # the dead-letters flags are terms too (--since/--until come parsed: epoch seconds, which
    # round-trip through repr)
    for key, value in (("tenant", args.tenant), ("since", args.since), ("before", args.until)):
        if value is not None:
            pairs.append((key, value if isinstance(value, str) else repr(value)))
    return default_limit(parse_filter(pairs, now=time.time()), args.limit)


async def bulk_replay(args: argparse.Namespace, stores: Any, flt: BulkFilter) -> int:
    return await run_bulk(args, stores, flt, REPLAY, "dead-letters replay")


async def run_bulk(args: argparse.Namespace, stores: Any, flt: BulkFilter, action: str,
                   command: str) -> int:
    """Plan, print, confirm, apply with a progress bar, summarize: the bulk ``action`` on the
    rows ``flt`` takes (``args``: json, dry_run, yes, rate, by, and a cancel's reason)."""
    from board_outbox.engine.upkeep.bulk_actions import write_of
    from board_outbox.engine.upkeep.bulk_replay import DEFAULT_RATE, Stop, apply_bulk, plan_bulk_replay
    from board_outbox.model.clock import SystemClock
    from board_outbox.surface.bulk_filter import plan_lines

    clock = SystemClock()
    plan = await plan_bulk_replay(stores.outbox, stores.subs, flt, clock=clock)
    if args.json:
        print_json(plan)  # the plan, then (applied) the summary: two JSON documents
    else:
        for line in plan_lines(plan):
            print(line)
    if args.dry_run or not plan.matched:
        if not args.json:
            print("dry run: nothing changed" if args.dry_run else f"nothing to {action}")
        return 0
    rate = args.rate if args.rate is not None else DEFAULT_RATE
    question = f"{action.capitalize()} {plan.matched} {NOUNS[flt.state]}s"
    if plan.expired:
        question = (f"{action.capitalize()} {plan.matched} rows ({plan.pending} pending, "
                    f"{plan.expired} claimed with an expired lease)")
    if not args.yes and not confirm_bulk(command, question, plan.matched, rate):
        print(f"nothing {DONE_WORDS[action]}")
        return 1
    by = args.by or getpass.getuser()
    bulk_id = uuid.uuid4().hex[:12]
    write = write_of(action, stores.outbox, bulk_id=bulk_id, by=by, clock=clock,
                     why=getattr(args, "reason", None) or "")
    stop = Stop()
    sys.stdout.flush()
    with _progress_bar(plan.matched, action) as progress:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signals, stop)
            prog = await apply_bulk(stores.outbox, stores.subs, plan, write, bulk_id=bulk_id,
                                    by=by, clock=clock, rate=rate, stop=stop,
                                    on_progress=progress)
            tg.cancel_scope.cancel()
    if args.json:
        print_json(prog)
    else:
        print(prog.summary())
    if prog.state == ABORTED:
        return EXIT_ABORTED
    return 0 if prog.state == RUN_DONE and not prog.refused else 1


async def _stop_on_signals(stop: Stop) -> None:
    """SIGINT/SIGTERM: stop before the next row (the row in flight finishes)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for sig in signals:
            if not stop.requested:
                print(f"board-outbox: {signal.Signals(sig).name}: stopping after the row in "
                      "flight", file=sys.stderr)
            stop.set()


@contextmanager
def _progress_bar(planned: int, action: str) -> Iterator[Callable[[BulkProgress], None]]:
    """A rich progress bar on stderr: rows applied, skipped or refused of those planned."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    did = DONE_WORDS[action]
    with Progress(TextColumn(action + " {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), transient=False, console=Console(stderr=True)) as bar:
        task = bar.add_task("rows", total=planned)

        def progress(p: BulkProgress) -> None:
            bar.update(task, completed=planned - p.remaining,
                       description=f"{p.applied} {did}, {p.skipped} skipped")

        yield progress
