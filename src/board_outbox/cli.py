"""The ``board-outbox`` command line."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import msgspec

from .errors import BoardOutboxError, ConfigError, StoreUnavailable

log = logging.getLogger("board_outbox.cli")

DESCRIPTION = """\
board-outbox turns a changefeed of board events (MongoDB `board_events`) into durable,
exactly-once-in-steady-state effects: bot launches and projection updates (ADR-094).

Configuration: --config FILE (TOML) or BOARD_OUTBOX_CONFIG, overridden by environment
variables BOARD_OUTBOX_<SECTION>__<NAME> (e.g. BOARD_OUTBOX_STORE__URI). Tracing and metrics:
the standard OTEL_* variables (see tracing/README.md).

Run `board-outbox COMMAND --help` for each command."""

StoresFactory = Callable[..., AbstractAsyncContextManager[Any]]


# --- argument types -----------------------------------------------------------------------


def _number(kind: type, text: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _number(int, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return int(value)


def _positive_float(text: str) -> float:
    value = _number(float, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return float(value)


def _fraction(text: str) -> float:
    value = _number(float, text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {value}")
    return float(value)


def _when(text: str) -> float:
    from .admin import parse_when

    try:
        return parse_when(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --- parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="board-outbox", description=DESCRIPTION,
                                     formatter_class=fmt)
    parser.add_argument("--version", action="version", version="%(prog)s " + _version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="FILE",
                        help="TOML configuration file (default: $BOARD_OUTBOX_CONFIG, else defaults)")

    demo = sub.add_parser(
        "demo", formatter_class=fmt,
        help="run the whole pipeline on the in-memory backend with a synthetic board",
        description=(
            "Run the tail, the change-feed waker and the effect worker on the in-memory backend\n"
            "while a synthetic board emits card events across several tenants. Prints a live\n"
            "summary (events, rows by state, launches, projection updates) and checks the\n"
            "result at the end: exit 0 when every event was materialized once and every row\n"
            "settled, 1 otherwise."
        ),
    )
    demo.add_argument("--tenants", type=_positive_int, default=3, help="tenants (default 3)")
    demo.add_argument("--events", type=_positive_int, default=3000,
                      help="board events to emit (default 3000)")
    demo.add_argument("--rate", type=_positive_float, default=1500.0,
                      help="events per second the board emits (default 1500)")
    demo.add_argument("--failure-rate", type=_fraction, default=0.1,
                      help="share of launch attempts that fail and are retried (default 0.1)")
    demo.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    demo.add_argument("--timeout", type=_positive_float, default=60.0,
                      help="give up after this many seconds (default 60)")

    sub.add_parser(
        "run", parents=[common], formatter_class=fmt,
        help="run one replica: change-stream waker, drain loop and effect worker",
        description=(
            "Run one board-outbox replica until SIGTERM/SIGINT. Start as many replicas as you\n"
            "like against one replica set: there is no leader; the cursor compare-and-set and\n"
            "the leased claims keep materialization and execution exactly-once in steady state.\n"
            "On SIGTERM/SIGINT the worker stops claiming, finishes its in-flight row or gives it\n"
            "back within service.shutdown_grace_seconds, and the process exits 0. A second\n"
            "signal cancels at once (claims are still released). The schema is ensured at start."
        ),
    )

    sub.add_parser(
        "ensure-schema", parents=[common], formatter_class=fmt,
        help="create the MongoDB indexes (idempotent)",
        description=(
            "Create trigger_effects' (tenant_id, state, not_before) index, its unique row-key\n"
            "index and the partial TTL index expiring done rows after 7 days (failed rows never\n"
            "expire), plus the board_events and read-model indexes. Safe to run repeatedly."
        ),
    )

    dl = sub.add_parser(
        "dead-letters", formatter_class=fmt, help="list, show, replay or purge failed rows",
        description=(
            "Rows that spent their attempt budget (or failed permanently) park as state=failed:\n"
            "the dead-letter queue. These commands are safe while workers run: replay only moves\n"
            "a row that is still failed, and purge only deletes failed rows."
        ),
    )
    dls = dl.add_subparsers(dest="dl_command", metavar="ACTION", required=True)
    filt = argparse.ArgumentParser(add_help=False, parents=[common])
    filt.add_argument("--tenant", help="only this tenant")
    filt.add_argument("--since", type=_when, help="parked at or after (ISO time, or an age: 2h, 7d)")
    filt.add_argument("--until", type=_when, help="parked before (ISO time, or an age: 2h, 7d)")
    filt.add_argument("--limit", type=_positive_int, default=100, help="at most N rows (default 100)")
    ls = dls.add_parser("list", parents=[filt], help="list dead-letters, newest first",
                        description="List dead-letters, newest first.")
    ls.add_argument("--json", action="store_true", help="one JSON document per line")
    show = dls.add_parser("show", parents=[common], help="show one row in full",
                          description="Show one row in full (errors and audit history included).")
    show.add_argument("row_key", metavar="ROW_KEY")
    rp = dls.add_parser("replay", parents=[filt], formatter_class=fmt,
                        help="return rows to pending with attempts reset",
                        description=(
                            "Return dead-letters to pending with attempts reset. The error history\n"
                            "is kept and an audit entry records who replayed it and when. Name rows\n"
                            "by ROW_KEY, or use --all with the filters."))
    rp.add_argument("row_keys", metavar="ROW_KEY", nargs="*")
    rp.add_argument("--all", action="store_true", help="replay every dead-letter the filters match")
    rp.add_argument("--by", default="", help="who replays (audit; default $USER)")
    pg = dls.add_parser("purge", parents=[filt], help="delete dead-letters (asks first)",
                        description="Delete the dead-letters the filters match. Asks for "
                                    "confirmation unless --yes.")
    pg.add_argument("--yes", action="store_true", help="do not ask")

    rb = sub.add_parser(
        "rebuild", parents=[common], formatter_class=fmt,
        help="rebuild a projection's read model from seq 0",
        description=(
            "Reset PROJECTION's read model for one tenant and replay the tenant's events from\n"
            "seq 0, with a progress bar. Stops at a young seq gap (an insert may still be in\n"
            "flight) rather than stepping over it; older gaps are dead allocations and are\n"
            "stepped over. Safe while the service runs: its projection rows carry on from there."
        ),
    )
    rb.add_argument("projection", metavar="PROJECTION", help="e.g. board-reflect")
    rb.add_argument("--tenant", required=True, help="the tenant to rebuild")
    rb.add_argument("--batch-size", type=_positive_int, default=1000,
                    help="events read per query (default 1000)")
    return parser


def _version() -> str:
    from . import __version__

    return __version__


# --- commands -----------------------------------------------------------------------------


def _default_factory(cfg: Any, *, ensure_schema: bool = False) -> AbstractAsyncContextManager[Any]:
    from .backends import open_backend

    return open_backend(cfg, ensure_schema=ensure_schema)


async def cmd_run(args: argparse.Namespace, factory: StoresFactory) -> int:
    from .config import load_config
    from .logs import setup_logging
    from .otel import setup_telemetry
    from .runtime import Service

    cfg = load_config(args.config)
    setup_logging(cfg.service.log_format, cfg.service.log_level)
    tel = setup_telemetry(replica=cfg.service.replica_name)
    try:
        async with factory(cfg, ensure_schema=cfg.store.backend == "mongo") as stores:
            service = Service(stores, cfg)
            where = (cfg.store.backend if cfg.store.backend == "memory"
                     else f"mongo database {cfg.store.database!r}")
            log.info("running on %s; projections: %s; %s", where,
                     ", ".join(cfg.projections) or "none",
                     "; ".join(tel.described) or "telemetry off (no OTEL_* exporter set)")
            async with anyio.create_task_group() as tg:
                tg.start_soon(_on_signals, service, tg.cancel_scope)
                await service.run()
                tg.cancel_scope.cancel()
    finally:
        tel.shutdown()
    return 0


async def _on_signals(service: Any, scope: anyio.CancelScope) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for sig in signals:
            if not service.stopping:
                log.info("%s: shutting down gracefully", signal.Signals(sig).name)
                service.stop()
            else:
                log.warning("%s again: cancelling now", signal.Signals(sig).name)
                scope.cancel()


async def cmd_ensure_schema(args: argparse.Namespace, factory: StoresFactory) -> int:
    from .config import load_config

    cfg = load_config(args.config)
    if cfg.store.backend != "mongo":
        raise ConfigError("store.backend: ensure-schema needs the mongo backend (it is 'memory')")
    from .backends import mongo_client
    from .mongo import ensure_schema

    client = mongo_client(cfg.store)
    try:
        names = await ensure_schema(client[cfg.store.database])
    finally:
        await client.close()
    print(f"schema ensured on {cfg.store.database!r}: {', '.join(names)}")
    return 0


async def cmd_dead_letters(args: argparse.Namespace, factory: StoresFactory) -> int:
    import getpass

    from .admin import dead_letter_filter, replay_rows, row_json
    from .clock import SystemClock
    from .config import load_config

    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        outbox = stores.outbox
        if args.dl_command == "show":
            row = await outbox.get(args.row_key)
            if row is None:
                print(f"board-outbox: no row {args.row_key!r}", file=sys.stderr)
                return 1
            print(row_json(row).decode())
            return 0
        flt = dead_letter_filter(args.tenant, args.since, args.until, args.limit)
        if args.dl_command == "list":
            rows = await outbox.find(flt)
            if args.json:
                for r in rows:
                    print(msgspec.json.encode(r).decode())
            else:
                _print_dead_letters(rows)
            return 0
        if args.dl_command == "replay":
            if bool(args.row_keys) == bool(args.all):
                raise _UsageError("dead-letters replay: give ROW_KEY(s) or --all, not both")
            keys = args.row_keys or [r.row_key for r in await outbox.find(flt)]
            by = args.by or getpass.getuser()
            done = await replay_rows(outbox, keys, SystemClock(), by)
            for key in keys:
                print(("replayed " if key in done else "not a dead-letter, left alone: ") + key)
            print(f"{len(done)} of {len(keys)} rows returned to pending")
            return 0 if len(done) == len(keys) or args.all else 1
        # purge
        victims = await outbox.find(flt)
        if not victims:
            print("no dead-letters match")
            return 0
        if not args.yes:
            if not sys.stdin.isatty():
                raise _UsageError(f"dead-letters purge: {len(victims)} rows match; confirm with --yes "
                                  "(standard input is not a terminal to ask on)")
            answer = input(f"Delete {len(victims)} dead-letters for good? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                print("nothing deleted")
                return 1
        n = await outbox.purge(flt)
        print(f"purged {n} dead-letters")
        return 0


def _print_dead_letters(rows: Sequence[Any]) -> None:
    from datetime import UTC, datetime

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


async def cmd_rebuild(args: argparse.Namespace, factory: StoresFactory) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from .admin import rebuild_projection
    from .clock import SystemClock
    from .config import load_config
    from .runtime import build_registry

    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        registry = build_registry(stores, cfg.projections)
        if args.projection not in registry.projections:
            raise ConfigError(f"projections: {args.projection!r} is not enabled "
                              f"(enabled: {', '.join(registry.projections) or 'none'})")
        with Progress(TextColumn("rebuild {task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), transient=False,
                      console=Console(stderr=True)) as bar:
            task = bar.add_task(f"{args.projection} / {args.tenant}", total=None)

            def progress(done: int, head: int) -> None:
                bar.update(task, completed=done, total=max(head, done))

            res = await rebuild_projection(
                name=args.projection, tenant_id=args.tenant, registry=registry,
                events=stores.events, cards=stores.cards, clock=SystemClock(),
                young_gap_seconds=cfg.tail.young_gap_seconds, batch_size=args.batch_size,
                progress=progress,
            )
    print(f"rebuilt {res.projection} for {res.tenant_id}: {res.applied} events applied up to seq "
          f"{res.cursor} of {res.head}; {res.skipped_deleted} of deleted cards skipped, "
          f"{res.skipped_malformed} malformed skipped, {res.stepped_gaps} dead allocations stepped over")
    if res.stopped_at_gap is not None:
        print(f"stopped at young gap: seq {res.stopped_at_gap} may still be inserting; "
              "the running service's projection rows continue from there (or rebuild again later)")
    return 0


class _UsageError(BoardOutboxError):
    pass


def _run_unwrapped(fn: Any, *args: Any) -> int:
    """Task groups wrap errors in exception groups; a user-facing error must still come out as
    one line, so a group of board-outbox errors is unwrapped to its first."""
    try:
        return int(anyio.run(fn, *args))
    except BaseExceptionGroup as group:
        leaves = list(_leaves(group))
        if leaves and all(isinstance(e, (BoardOutboxError, KeyboardInterrupt)) for e in leaves):
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> Any:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


COMMANDS = {"run": cmd_run, "ensure-schema": cmd_ensure_schema, "dead-letters": cmd_dead_letters,
            "rebuild": cmd_rebuild}


def main(argv: Sequence[str] | None = None, factory: StoresFactory | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "demo":
            from .demo import DemoOptions, run_demo
            from .otel import setup_telemetry

            opts = DemoOptions(
                tenants=args.tenants, events=args.events, rate=args.rate,
                failure_rate=args.failure_rate, seed=args.seed, timeout=args.timeout,
            )
            tel = setup_telemetry(replica="demo")  # exports only when OTEL_* asks for it
            try:
                return anyio.run(run_demo, opts)
            finally:
                tel.shutdown()
        return _run_unwrapped(COMMANDS[args.command], args, factory or _default_factory)
    except (ConfigError, _UsageError) as exc:
        print(f"board-outbox: {'config error: ' if isinstance(exc, ConfigError) else ''}{exc}",
              file=sys.stderr)
        return 2
    except StoreUnavailable as exc:
        print(f"board-outbox: store unavailable: {exc}", file=sys.stderr)
        return 1
    except BoardOutboxError as exc:
        print(f"board-outbox: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("board-outbox: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
