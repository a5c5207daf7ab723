"""The ``board-outbox`` command line: parse (``parser``), dispatch to a command module
(``commands/``), and turn errors into one line on stderr and an exit code."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from board_outbox.model.errors import (
    BoardOutboxError,
    ConfigError,
    ProjectionFailed,
    StoreUnavailable,
    UsageError,
)
from board_outbox.surface.cli.commands import Command, StoresFactory, default_factory
from board_outbox.surface.cli.commands.apitokens import cmd_api_tokens
from board_outbox.surface.cli.commands.audit import cmd_audit
from board_outbox.surface.cli.commands.completion import cmd_completion
from board_outbox.surface.cli.commands.console import cmd_console
from board_outbox.surface.cli.commands.cursor import cmd_cursor
from board_outbox.surface.cli.commands.deadletters import cmd_dead_letters
from board_outbox.surface.cli.commands.demo import cmd_demo
from board_outbox.surface.cli.commands.doctor import cmd_doctor
from board_outbox.surface.cli.commands.explain import cmd_explain
from board_outbox.surface.cli.commands.pause import cmd_pause, cmd_paused, cmd_resume
from board_outbox.surface.cli.commands.rebuild import cmd_rebuild
from board_outbox.surface.cli.commands.replay import cmd_replay
from board_outbox.surface.cli.commands.rows import cmd_rows
from board_outbox.surface.cli.commands.run import cmd_run
from board_outbox.surface.cli.commands.schema import cmd_ensure_schema
from board_outbox.surface.cli.commands.status import cmd_status
from board_outbox.surface.cli.commands.subscriptions import cmd_subscriptions
from board_outbox.surface.cli.parser import build_parser

__all__ = ["COMMANDS", "StoresFactory", "build_parser", "main"]


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


COMMANDS: dict[str, Command] = {
    "demo": cmd_demo, "run": cmd_run, "ensure-schema": cmd_ensure_schema,
    "dead-letters": cmd_dead_letters, "rebuild": cmd_rebuild,
}
COMMANDS["status"] = cmd_status
COMMANDS["console"] = cmd_console
COMMANDS["cursor"] = cmd_cursor
COMMANDS["audit"] = cmd_audit
COMMANDS["replay"] = cmd_replay
COMMANDS["pause"] = cmd_pause
COMMANDS["resume"] = cmd_resume
COMMANDS["paused"] = cmd_paused
COMMANDS["explain"] = cmd_explain
COMMANDS["subscriptions"] = cmd_subscriptions
COMMANDS["doctor"] = cmd_doctor
COMMANDS["completion"] = cmd_completion
COMMANDS["rows"] = cmd_rows
COMMANDS["api-tokens"] = cmd_api_tokens


def main(argv: Sequence[str] | None = None, factory: StoresFactory | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run_unwrapped(COMMANDS[args.command], args, factory or default_factory)
    except (ConfigError, UsageError, ProjectionFailed) as exc:
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
    except BrokenPipeError:  # `board-outbox ... | head`: the reader has all it wanted
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        return 0
