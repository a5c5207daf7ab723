"""``cursor reset`` refuses a tenant the store does not know (issue 30): a typo used to write a
cursor for a tenant with no counter, no events, no subscriptions and no rows -- a ghost the poll
net then carried forever. One line, exit 2, nothing written; a tenant the store knows in any way
(a counter, a subscription, a live row, a cursor of its own) is reset as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.rows import EffectRow
from board_outbox.model.subscriptions import Subscription
from board_outbox.surface.cli import main


def _cli(b: MemoryBackend, *args: str) -> int:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield b.stores()

    return main(["cursor", *args], factory=factory)


def test_cursor_reset_of_an_unknown_tenant_is_one_line_exit_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    b = MemoryBackend()
    anyio.run(b.events.emit, "real", "card.created", "c")
    assert _cli(b, "reset", "--tenant", "ghost", "--to", "0") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown tenant 'ghost'" in err and "Traceback" not in err
    assert "ghost" not in b.cursors._cursors
    assert _cli(b, "reset", "--tenant", "real", "--to", "0") == 0
    assert b.cursors._cursors["real"] == 0


@pytest.mark.parametrize("known_by", ["counter", "subscription", "live row", "cursor"])
def test_cursor_reset_of_a_tenant_known_in_any_way_is_done(
        known_by: str, capsys: pytest.CaptureFixture[str]) -> None:
    b = MemoryBackend()
    t = "quiet"

    async def plant() -> None:
        if known_by == "counter":
            await b.events.allocate_seq(t)
        elif known_by == "subscription":
            await b.subs.put(Subscription(sub_id="s", tenant_id=t, bot="b"))
        elif known_by == "live row":
            await b.outbox.upsert_rows([EffectRow(tenant_id=t, row_key=f"{t}/1/sub/s", seq=1,
                                                  kind="launch", sub_id="s")])
        else:
            await b.cursors.seed(t, 0)

    anyio.run(plant)
    assert _cli(b, "reset", "--tenant", t, "--to", "0") == 0, capsys.readouterr().err
    assert b.cursors._cursors[t] == 0
