"""The load test's final audit, through the ports only (so it runs on any backend)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from board_outbox.engine.tail.reading import card_ids, decode_event, snapshot
from board_outbox.model.subscriptions import matches
from board_outbox.ports import Stores


async def audit(stores: Stores, tenants: Iterable[str], row_docs: list[dict[str, Any]],
                launched_keys: list[str]) -> dict[str, Any]:
    """Expected rows (every event x every subscription it matches) vs the outbox and launches."""
    expected: set[str] = set()
    events = 0
    for t in sorted(tenants):
        recs = await stores.events.read_after(t, 0, 10**9)
        evs = [decode_event(t, r) for r in recs]
        events += len(evs)
        cards = await stores.cards.get_many(t, card_ids(evs))
        subs = await stores.subs.list_for_tenant(t)
        for ev in evs:
            snap = snapshot(ev, cards)
            for sub in subs:
                if matches(sub, snap):
                    expected.add(f"{t}/{ev.seq}/sub/{sub.sub_id}")
    keys = [d["row_key"] for d in row_docs if d.get("kind", "launch") == "launch"]
    actual = set(keys)
    launches: dict[str, int] = {}
    for key in launched_keys:
        launches[key] = launches.get(key, 0) + 1
    return {
        "events": events,
        "expected_rows": len(expected),
        "rows": len(keys),
        "duplicate_rows": len(keys) - len(actual),
        "lost_rows": len(expected - actual),
        "unexpected_rows": len(actual - expected),
        "not_done": sum(1 for d in row_docs if d.get("state") != "done"),
        "launches": len(launched_keys),
        "rows_never_launched": sum(1 for k in expected if k not in launches),
        "rows_launched_twice": sum(1 for n in launches.values() if n > 1),
    }
