"""Run ``board-outbox`` so that SIGUSR1 writes the stack of every asyncio task it runs to the
file named by ``BENCH_TASK_DUMP`` (``catchup.py --spy``): what each loop awaits while a replica
makes no progress, which ``py-spy`` (threads only) cannot show. With ``BENCH_STATEMENT_LOG`` set,
every command is logged too (``statement_log.py``).

Run: ``python -m benchmarks.taskdump run --config FILE``.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import sys
import time
from types import FrameType
from typing import Any


def chain(coro: Any) -> list[str]:
    """The await chain of a suspended coroutine, outermost first: ``file:line function``."""
    out = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return out


def dump(_sig: int, _frame: FrameType | None) -> None:
    """Every task of the running loop, with its await chain (called in the loop's thread)."""
    loop = asyncio._get_running_loop()
    out = io.StringIO()
    out.write(f"==== tasks at {time.strftime('%H:%M:%S')}\n")
    if loop is None:
        out.write("no running loop\n")
    else:
        for task in asyncio.all_tasks(loop):
            out.write(f"--- {task.get_name()}\n")
            for line in chain(task.get_coro()):
                if "board_outbox" in line or "benchmarks" in line:
                    out.write(f"    {line}\n")
    with open(os.environ["BENCH_TASK_DUMP"], "a") as f:
        f.write(out.getvalue())


def main() -> int:
    signal.signal(signal.SIGUSR1, dump)
    if os.environ.get("BENCH_STATEMENT_LOG"):
        from benchmarks import statement_log

        return statement_log.main()
    from board_outbox.surface.cli import main as cli

    sys.argv[0] = "board-outbox"
    return int(cli() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
