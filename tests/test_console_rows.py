"""The console's row page explains the row (issue 33, item 4): what holds it now, by name, and
its timeline -- the same answer as ``board-outbox explain`` -- escaped like every page, linked
to the rows that hold its limit. A standalone console over the memory twins (no service runs,
so nothing claims the rows while a page is read)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import EventSnapshot
from board_outbox.model.limits import bot_key
from board_outbox.model.rows import ErrorEntry, new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.surface.console import build_console

pytestmark = pytest.mark.anyio

T = "acme"
EVIL = "<script>alert(1)</script>"


async def _row(b: MemoryBackend, seq: int, **fields: object) -> str:
    now = time.time()
    b.events.insert_now({"tenant_id": T, "seq": seq, "type": "card.created", "card_id": "c",
                         "at": now - 5})
    row = new_launch_row(T, EventSnapshot(seq=seq, type="card.created", card_id="c", at=now - 5),
                         Subscription(sub_id="s", tenant_id=T, bot="b"), now=now)
    for name, value in fields.items():
        setattr(row, name, value)
    await b.outbox.upsert_rows([row])
    return row.row_key


@asynccontextmanager
async def console(b: MemoryBackend) -> AsyncIterator[httpx.AsyncClient]:
    app = build_console(b.stores(), load_config(env={}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://127.0.0.1") as client:
        yield client


async def test_a_deferred_row_page_names_its_limit_and_links_its_holders() -> None:
    b = MemoryBackend()
    await b.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b", max_in_flight=2))
    now = time.time()
    key = await _row(b, 1, waiting=f"bot limit (in_flight) of {bot_key(T, 'b')}",
                     not_before=now + 30, updated_at=now)
    for holder in (f"{T}/7/sub/s:c7", f"{EVIL}:c"):
        assert await b.limits.acquire(bot_key(T, "b"), 2, holder, until=now + 60, now=now)
    async with console(b) as client:
        page = await client.get(f"/rows/{key}")
    assert page.status_code == 200
    html = page.text
    assert 'data-hold="limit"' in html and "2 of 2 slots held now" in html
    assert f'href="/rows/{T}/7/sub/s"' in html  # the holding row, one click away
    assert 'href="/rows/%3Cscript%3Ealert%281%29%3C/script%3E"' in html  # url-encoded
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;:c" in html
    assert '<script' not in html.lower()
    for moment in ("event", "materialized", "deferred"):
        assert f'data-moment="{moment}"' in html
    assert f"board-outbox explain {key}" in html


async def test_the_row_page_shows_a_priority_other_than_0() -> None:
    b = MemoryBackend()
    await b.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    high, plain = await _row(b, 1, priority=7), await _row(b, 2)
    async with console(b) as client:
        shown, unshown = (await client.get(f"/rows/{high}")).text, (
            await client.get(f"/rows/{plain}")).text
    assert '<span id="priority">priority 7</span>' in shown
    assert "priority 7: within its tenant" in shown  # the explanation's note
    assert 'id="priority"' not in unshown


async def test_hostile_text_in_errors_and_waiting_is_escaped_on_the_row_page() -> None:
    b = MemoryBackend()
    now = time.time()
    key = await _row(b, 1, state="failed", attempts=1, updated_at=now,
                     errors=[ErrorEntry(attempt=1, at=now, error=f"bot said {EVIL}")])
    waiting = await _row(b, 2, waiting=f"over {EVIL}", not_before=now + 30)
    async with console(b) as client:
        failed = (await client.get(f"/rows/{key}")).text
        held = (await client.get(f"/rows/{waiting}")).text
    assert 'data-hold="failed"' in failed and f"dead-letters replay {key}" in failed
    for html in (failed, held):
        assert EVIL not in html and "&lt;script&gt;" in html


async def test_a_malformed_row_page_explains_it_and_a_text_that_is_no_key_is_404() -> None:
    b = MemoryBackend()
    b.outbox.insert_raw({"tenant_id": T, "row_key": f"{T}/9/sub/s", "seq": 9, "state": "failed",
                         "attempts": EVIL, "updated_at": time.time()})
    async with console(b) as client:
        bad = await client.get(f"/rows/{T}/9/sub/s")
        nokey = await client.get("/rows/acme/x/sub/s")
        missing = await client.get(f"/rows/{T}/8/sub/s")
    assert bad.status_code == 200 and 'data-hold="malformed"' in bad.text
    assert "malformed effect row" in bad.text and EVIL not in bad.text
    assert nokey.status_code == 404 and "is not a row key" in nokey.text
    assert missing.status_code == 404 and "No effect row has the key" in missing.text


async def test_a_coalesced_row_page_links_the_row_that_ran_and_the_tenant_counts_it() -> None:
    """Issue 33, item 2: a coalesced row's page names the hold ``coalesced`` and links the newer
    row of its (subscription, card) that covers it; the tenant page counts it by state."""
    from datetime import UTC, datetime

    b = MemoryBackend()
    await b.subs.put(Subscription(sub_id="s", tenant_id=T, bot="b"))
    now = time.time()
    into = f"{T}/2/sub/s"
    key = await _row(b, 1, state="coalesced", coalesced_into=into, burst_at=now - 5,
                     outcome=f"coalesced into {into}", done_at=datetime.fromtimestamp(now, UTC))
    await _row(b, 2, state="done", outcome="launched l-1", burst_at=now - 5,
               done_at=datetime.fromtimestamp(now, UTC))
    async with console(b) as client:
        page = await client.get(f"/rows/{key}")
        tenant = await client.get(f"/tenants/{T}")
    assert page.status_code == 200
    html = page.text
    assert 'data-hold="coalesced"' in html
    assert f'id="coalesced-into" href="/rows/{into}"' in html  # the row that ran, one click away
    assert tenant.status_code == 200 and "<th class=\"num\">coalesced</th>" in tenant.text


async def test_a_row_coalesced_into_a_superseded_row_links_the_row_that_ran() -> None:
    """Edits a little apart: row 1 was superseded by row 7, itself by row 8, which ran. Row 1's
    page links row 7 (what the row records) and, one click away, row 8: the row that ran, with
    the chain between them."""
    from datetime import UTC, datetime

    b = MemoryBackend()
    now = time.time()
    done = datetime.fromtimestamp(now, UTC)
    seven, eight = f"{T}/7/sub/s", f"{T}/8/sub/s"
    key = await _row(b, 1, state="coalesced", coalesced_into=seven, burst_at=now - 5, done_at=done)
    await _row(b, 7, state="coalesced", coalesced_into=eight, burst_at=now - 5, done_at=done)
    await _row(b, 8, state="done", outcome="launched l-8", burst_at=now - 5, done_at=done)
    async with console(b) as client:
        page = await client.get(f"/rows/{key}")
        last = await client.get(f"/rows/{eight}")
    assert page.status_code == 200 and last.status_code == 200
    html = page.text
    assert f'id="coalesced-into" href="/rows/{seven}"' in html
    assert f'id="coalesced-ran" href="/rows/{eight}"' in html
    assert 'id="coalesced-chain"' in html and f"{eight} ran instead (launched l-8)" in html
    assert 'id="coalesced-ran"' not in last.text  # the row that ran is not coalesced


async def test_a_coalesced_row_whose_chain_loops_says_so() -> None:
    from datetime import UTC, datetime

    b = MemoryBackend()
    now = time.time()
    done = datetime.fromtimestamp(now, UTC)
    key = await _row(b, 1, state="coalesced", coalesced_into=f"{T}/2/sub/s", done_at=done)
    await _row(b, 2, state="coalesced", coalesced_into=key, done_at=done)
    async with console(b) as client:
        page = await client.get(f"/rows/{key}")
    assert page.status_code == 200 and 'id="coalesced-problem"' in page.text
    assert "loops back to" in page.text and 'id="coalesced-ran"' not in page.text


async def test_a_held_row_page_names_its_pause_since_and_who() -> None:
    """F3: a row held for its tenant's pause shows the ``paused`` hold -- the pause's scope,
    key, since when and who -- and no limit."""
    from board_outbox.model.pause import held_not_before, reason_of

    b = MemoryBackend()
    now = time.time()
    assert await b.pauses.pause("tenant", T, reason=EVIL, by="ana", at=now - 120)
    key = await _row(b, 1, waiting=reason_of("tenant", T),
                     not_before=held_not_before(now - 100))
    async with console(b) as client:
        page = await client.get(f"/rows/{key}")
    assert page.status_code == 200
    html = page.text
    assert 'data-hold="paused"' in html and 'data-hold="limit"' not in html
    assert "held by the pause of tenant acme, since" in html and "by ana" in html
    assert EVIL not in html and "&lt;script&gt;" in html
