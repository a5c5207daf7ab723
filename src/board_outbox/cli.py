"""The ``board-outbox`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import anyio

from .errors import BoardOutboxError, ConfigError

DESCRIPTION = """\
board-outbox turns a changefeed of board events (MongoDB `board_events`) into durable,
exactly-once-in-steady-state effects: bot launches and projection updates (ADR-094).
Run `board-outbox COMMAND --help` for each command."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="board-outbox", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="run the whole pipeline on the in-memory backend with a synthetic board",
        description=(
            "Run the tail, the change-feed waker and the effect worker on the in-memory backend "
            "while a synthetic board emits card events across several tenants. Prints a live "
            "summary (events, rows by state, launches, projection updates) and checks the "
            "result at the end: exit 0 when every event was materialized once and every row "
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "demo":
            from .demo import DemoOptions, run_demo

            opts = DemoOptions(
                tenants=args.tenants, events=args.events, rate=args.rate,
                failure_rate=args.failure_rate, seed=args.seed, timeout=args.timeout,
            )
            return anyio.run(run_demo, opts)
    except ConfigError as exc:
        print(f"board-outbox: config error: {exc}", file=sys.stderr)
        return 2
    except BoardOutboxError as exc:
        print(f"board-outbox: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("board-outbox: interrupted", file=sys.stderr)
        return 130
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
