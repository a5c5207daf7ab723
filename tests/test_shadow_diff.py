"""Diff before swap (A3): ``rebuild --shadow`` stops before the swap and reports how the new
generation differs from the live one; ``--swap`` swaps, ``--swap-if-unchanged`` swaps only an
identical generation (else exit 1). On the memory twin and over the wire."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.ports import ReadModelStore, ReadModelVersions, ReadModelVersionStore
from board_outbox.surface.cli import main

T = "t1"
P = "board-reflect"


def run_cli(backend: MemoryBackend, *args: str) -> int:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield backend.stores()

    return main(list(args), factory=factory)


async def _seed_live_model(rm: ReadModelStore) -> None:
    """The live generation 0 as a projection bug left it: c0 in the wrong column, a stray zz."""
    await rm.upsert_if_newer(P, T, "c0", 1, {"card_id": "c0", "title": "c0", "column": "wrong",
                                            "labels": [], "deleted": False})
    await rm.upsert_if_newer(P, T, "zz", 1, {"card_id": "zz", "column": "x"})


def _check_diff_then_swaps(run: Any, versions: ReadModelVersionStore, out: Any) -> None:
    assert run("rebuild", P, "--tenant", T, "--shadow") == 0
    text = out()
    assert "diff, generation 1 against the live generation 0: 3 added, 1 removed, 1 changed, " \
           "0 unchanged (4 documents against 2)" in text
    assert "  changed  c0 (" in text and "column" in text.split("changed  c0 (")[1].split(")")[0]
    assert "  removed  zz" in text and "  added    c1" in text
    assert "not swapped (no --swap)" in text
    assert anyio.run(versions.get, P, T) == ReadModelVersions(active=0, building=1, progress=4)
    # only an identical generation is swapped in by --swap-if-unchanged
    assert run("rebuild", P, "--tenant", T, "--shadow", "--swap-if-unchanged") == 1
    assert "not swapped: the new generation differs" in out()
    assert anyio.run(versions.get, P, T).active == 0
    assert run("rebuild", P, "--tenant", T, "--shadow", "--swap", "--diff-examples", "1") == 0
    text = out()
    assert "resumed at seq 4" in text and "swapped: readers now see generation 1" in text
    assert text.count("  added ") == 1  # one example per kind
    assert anyio.run(versions.get, P, T) == ReadModelVersions(active=1)
    # a rebuild of the same log now equals the live generation: --swap-if-unchanged swaps it
    assert run("rebuild", P, "--tenant", T, "--shadow", "--swap-if-unchanged") == 0
    text = out()
    assert "0 added, 0 removed, 0 changed, 4 unchanged" in text and "swapped" in text
    assert anyio.run(versions.get, P, T) == ReadModelVersions(active=2)


def test_shadow_diff_before_swap_on_the_memory_twin(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOARD_OUTBOX_STORE__GENERATION_CACHE_SECONDS", "0.01")
    backend = MemoryBackend()

    async def seed() -> None:
        for i in range(4):
            await backend.board.put(Card(tenant_id=T, card_id=f"c{i}", title=f"c{i}", column="doing"))
            await backend.events.emit(T, "card.created", f"c{i}", time.time() - 3600)
        await _seed_live_model(backend.readmodels)

    anyio.run(seed)
    _check_diff_then_swaps(lambda *a: run_cli(backend, *a), backend.rm_versions,
                           lambda: capsys.readouterr().out)


def test_swap_flags_need_shadow(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(MemoryBackend(), "rebuild", P, "--tenant", T, "--swap") == 2
    assert "only go with --shadow" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        run_cli(MemoryBackend(), "rebuild", P, "--tenant", T, "--shadow", "--swap",
                "--swap-if-unchanged")
    assert exc.value.code == 2


@pytest.mark.live_mongo
def test_shadow_diff_before_swap_over_the_wire(
        live_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pymongo import AsyncMongoClient

    from board_outbox.adapters.memory import MemoryLauncher
    from board_outbox.adapters.mongo import ensure_schema, mongo_stores
    from board_outbox.adapters.mongo.generations import MongoGenerationStore

    dbname = f"shadow_diff_{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "bo.toml"
    conf.write_text(f'[store]\nbackend = "mongo"\nuri = "{live_uri}"\ndatabase = "{dbname}"\n'
                    "generation_cache_seconds = 0.01\n")

    async def seed() -> None:
        client: Any = AsyncMongoClient(live_uri, tz_aware=True)
        db = client[dbname]
        await ensure_schema(db)
        stores = mongo_stores(db, MemoryLauncher())
        for i in range(4):
            await stores.cards.put(Card(tenant_id=T, card_id=f"c{i}", title=f"c{i}", column="doing"))
            seq = await stores.events.allocate_seq(T)
            await stores.events.insert({"tenant_id": T, "seq": seq, "type": "card.created",
                                        "card_id": f"c{i}", "at": time.time() - 3600})
        await _seed_live_model(stores.readmodels)
        await client.close()

    async def drop() -> None:
        client: Any = AsyncMongoClient(live_uri)
        await client.drop_database(dbname)
        await client.close()

    async def pointer(model: str, tenant: str) -> ReadModelVersions:
        client: Any = AsyncMongoClient(live_uri, tz_aware=True)
        try:
            return await MongoGenerationStore(client[dbname]).get(model, tenant)
        finally:
            await client.close()

    class Versions:
        get = staticmethod(pointer)

    anyio.run(seed)
    try:
        _check_diff_then_swaps(lambda *a: main([*a, "--config", str(conf)]),
                               Versions(),  # type: ignore[arg-type]
                               lambda: capsys.readouterr().out)
    finally:
        anyio.run(drop)
