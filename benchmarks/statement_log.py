"""Run ``board-outbox`` with every command it sends logged, one line each (``replicas.py
--statements``, ``throughput.py --statements``): time, command, collection, statements in it (an
update command of 2 upserts is 2), the shape of its filter (the field names) and its round trip
in microseconds. The file is named by the ``BENCH_STATEMENT_LOG`` environment variable.

Run: ``python -m benchmarks.statement_log run --config FILE`` (the CLI's own arguments), or
``python -m benchmarks.statement_log --floor ARGS`` (a floor pipeline, ``floor.py``'s arguments:
the throughput floor, or ``--follow ...`` the latency floor).
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, Any

from pymongo import monitoring

# the array of statements of a write command, and where a command's filter is
_STATEMENTS = {"insert": "documents", "update": "updates", "delete": "deletes"}
_FILTER = {"find": "filter", "findAndModify": "query", "count": "query", "distinct": "query"}


def shape(name: str, cmd: Any) -> str:
    """The field names of a command's filter (sorted), e.g. ``_id,claim_id,state``."""
    q: Any = None
    if name in _FILTER:
        q = cmd.get(_FILTER[name])
    elif name in ("update", "delete"):
        first = (cmd.get(_STATEMENTS[name]) or [{}])[0]
        q = first.get("q")
    elif name == "aggregate":
        stages = cmd.get("pipeline") or [{}]
        q = stages[0].get("$match", {"stage": next(iter(stages[0]), "")})
    if not isinstance(q, dict):
        return ""
    return ",".join(sorted(str(k) for k in q))


class StatementLog(monitoring.CommandListener):
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._open: dict[int, str] = {}

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        name, cmd = event.command_name, event.command
        coll = cmd.get(name) if isinstance(cmd.get(name), str) else str(cmd.get("collection", ""))
        n = len(cmd.get(_STATEMENTS[name]) or ()) if name in _STATEMENTS else 1
        self._open[event.request_id] = f"{time.time():.4f}\t{name}\t{coll}\t{n}\t{shape(name, cmd)}"

    def _done(self, request_id: int, micros: int) -> None:
        line = self._open.pop(request_id, None)
        if line is not None:
            self.out.write(f"{line}\t{micros}\n")

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._done(event.request_id, event.duration_micros)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._done(event.request_id, event.duration_micros)


def main() -> int:
    out = open(os.environ["BENCH_STATEMENT_LOG"], "a", buffering=1)  # noqa: SIM115
    monitoring.register(StatementLog(out))
    if sys.argv[1:2] == ["--floor"]:
        from benchmarks import floor

        floor.cli(sys.argv[2:])
        return 0
    from board_outbox.surface.cli import main as cli

    sys.argv[0] = "board-outbox"
    return int(cli() or 0)


if __name__ == "__main__":
    raise SystemExit(main())
