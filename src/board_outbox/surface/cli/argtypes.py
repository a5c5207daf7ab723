"""The command line's argument types: each turns a bad value into argparse's one-line error
(exit 2) before anything is opened; and ``json_flag``, the ``--json`` flag the reporting
commands share."""

from __future__ import annotations

import argparse
from typing import Any


def number(kind: type, text: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


MAX_INT = 2**31 - 1  # a count or limit the store (and a human) can take


def positive_int(text: str) -> int:
    value = number(int, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    if value > MAX_INT:
        raise argparse.ArgumentTypeError(f"expected a number <= {MAX_INT}, got {value}")
    return int(value)


def seq_arg(text: str) -> int:
    value: int = number(int, text)
    if not 0 <= value <= 2**63 - 1:
        raise argparse.ArgumentTypeError(f"must be a seq (0 .. 2^63-1), not {text}")
    return value


def positive_float(text: str) -> float:
    value = number(float, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {value}")
    return float(value)


MAX_RATE = 100_000.0  # rows a second: far past what one store takes, short of a typo's 1e300


def rate(text: str) -> float:
    value = number(float, text)
    if not 0 < value <= MAX_RATE:  # nan and inf fail too
        raise argparse.ArgumentTypeError(f"expected rows a second, > 0 and <= {MAX_RATE:g}, got {text}")
    return float(value)


def fraction(text: str) -> float:
    value = number(float, text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a fraction between 0 and 1, got {value}")
    return float(value)


def first_seq(text: str) -> int:
    """A seq an event can have (``seq`` without 0)."""
    value = seq_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a seq >= 1, got {value}")
    return value


def when_arg(text: str) -> float:
    from board_outbox.surface.admin import parse_when

    try:
        return parse_when(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def port(text: str) -> int:
    port = number(int, text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return int(port)


def json_flag(parser: argparse.ArgumentParser, help_: str) -> argparse.ArgumentParser:
    """``--json``: the command prints what ``help_`` says as JSON instead of text."""
    parser.add_argument("--json", action="store_true", help=help_)
    return parser
