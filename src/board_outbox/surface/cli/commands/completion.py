"""``board-outbox completion bash|zsh|tcsh``: the shell completion script, generated from the
parser itself by shtab (every command, action and option; ``--config`` completes file names)."""

from __future__ import annotations

import argparse

from board_outbox.surface.cli.commands import StoresFactory


async def cmd_completion(args: argparse.Namespace, factory: StoresFactory) -> int:
    import shtab

    from board_outbox.surface.cli.parser import build_parser

    print(shtab.complete(build_parser(), shell=args.shell))
    return 0
