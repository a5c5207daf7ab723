"""User projections and effect kinds loaded by name (P1): topic strings and entry points, end to
end through ``board-outbox run`` and the demo; every bad plugin is a one-line error, exit 2."""

from __future__ import annotations

import importlib.metadata
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.service.runtime import build_registry
from board_outbox.surface.cli import main
from board_outbox.testing import ProjectionContract, check_projection
from tests.support import user_plugins
from tests.support.kits import Kit

T = "t1"
TOPIC = "tests.support.user_plugins"


def fake_entry_points(monkeypatch: pytest.MonkeyPatch, group: str, name: str, value: str) -> None:
    """Install a distribution's entry point, as ``pip install`` of a plugin package would."""
    real = importlib.metadata.entry_points
    ep = importlib.metadata.EntryPoint(name=name, value=value, group=group)

    def entry_points(**kw: Any) -> Any:
        if kw.get("group") == group:  # added to what is installed (the built-ins are entry points)
            return importlib.metadata.EntryPoints([*real(**kw), ep])
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def write_config(tmp_path: Path, projections: list[str], handlers: dict[str, str] | None = None) -> str:
    lines = ["projections = [" + ", ".join(f'"{p}"' for p in projections) + "]",
             "[tail]", "poll_interval_seconds = 0.1", 'seed = "earliest"',
             "[worker]", "idle_seconds = 0.05"]
    if handlers:
        lines.append("[handlers]")
        lines += [f'{k} = "{v}"' for k, v in handlers.items()]
    path = tmp_path / "board-outbox.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run_until(backend: MemoryBackend, config: str, done: Callable[[], bool]) -> int:
    """``board-outbox run`` in process on ``backend``; SIGINT (handled: graceful stop) once
    ``done()`` holds, or after 60 s."""

    def stopper() -> None:
        deadline = time.monotonic() + 60
        while not done() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        threading.Thread(target=stopper, daemon=True).start()
        yield backend.stores()

    return main(["run", "--config", config], factory=factory)


async def board(backend: MemoryBackend, n: int) -> None:
    for i in range(n):
        await backend.board.put(Card(tenant_id=T, card_id=f"c{i % 3}", title=f"title {i}"))
        seq = await backend.events.allocate_seq(T)
        await backend.events.insert({"tenant_id": T, "seq": seq, "type": "card.updated",
                                     "card_id": f"c{i % 3}", "at": 1000.0 + i, "actor": f"u{i}"})


def _model(backend: MemoryBackend, name: str) -> dict[str, dict[str, Any]]:
    return dict(backend.readmodels._docs.get((name, T), {}))


@pytest.mark.parametrize("via", ["topic", "entry point"])
def test_user_projection_runs_end_to_end_through_run(
    via: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    backend = MemoryBackend()
    anyio.run(board, backend, 9)
    if via == "topic":
        spec = f"{TOPIC}:TitleLog"
    else:
        fake_entry_points(monkeypatch, "board_outbox.projections", "title-log", f"{TOPIC}:TitleLog")
        spec = "title-log"
    cfg = write_config(tmp_path, ["board-reflect", spec, "card-activity"])

    def settled() -> bool:
        docs = backend.outbox.all_docs()
        return len(docs) == 27 and all(d.get("state") == "done" for d in docs)

    assert run_until(backend, cfg, settled) == 0
    model = _model(backend, "title-log")
    assert {k: (d["title"], d["by"], d["last_seq"]) for k, d in model.items()} == {
        "c0": ("title 6", "u6", 7), "c1": ("title 7", "u7", 8), "c2": ("title 8", "u8", 9)}
    activity = _model(backend, "card-activity")["c0"]["recent"]
    assert [(e["seq"], e["actor"], e["at"]) for e in activity] == [(7, "u6", 1006.0), (4, "u3", 1003.0),
                                                                   (1, "u0", 1000.0)]
    # the user projection rebuilds like a built-in, named as configured or by its name
    backend.readmodels._docs.pop(("title-log", T))
    assert main(["rebuild", spec, "--tenant", T, "--config", cfg],
                factory=lambda cfg, **_: _yield(backend)) == 0
    assert _model(backend, "title-log")["c2"]["title"] == "title 8"


@asynccontextmanager
async def _yield(backend: MemoryBackend) -> AsyncIterator[Any]:
    yield backend.stores()


@pytest.mark.parametrize("via", ["topic", "entry point"])
def test_user_projection_in_the_demo(
    via: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    if via == "topic":
        spec = f"{TOPIC}:ApplyOnly"
    else:
        fake_entry_points(monkeypatch, "board_outbox.projections", "apply-only", f"{TOPIC}:ApplyOnly")
        spec = "apply-only"
    rc = main(["demo", "--store", "memory", "--events", "300", "--rate", "4000", "--tenants", "2",
               "--projection", spec, "--projection", "card-activity"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "apply-only 0" in out and "card-activity 0" in out and "board-reflect 0" in out


@pytest.mark.anyio
@pytest.mark.parametrize("via", ["table", "entry point"])
async def test_user_effect_kind_dispatches_retries_and_dead_letters(
    via: str, kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    if via == "table":
        reg = build_registry(kit.stores, [], {"notify": f"{TOPIC}:Notify"})
    else:
        fake_entry_points(monkeypatch, "board_outbox.handlers", "notify", f"{TOPIC}:Notify")
        reg = build_registry(kit.stores, [])
    assert "notify" in reg.kinds
    user_plugins.NOTIFIED.clear()
    for key in ("n/1", "n/poison", "n/fatal"):
        await kit.insert_raw_row({"tenant_id": T, "row_key": key, "seq": 1, "kind": "notify",
                                  "state": "pending", "not_before": 0.0, "attempts": 0})
    worker = kit.worker(registry=reg, max_attempts=3, backoff={"base_seconds": 1, "jitter": 0})
    first = await worker.tick_any()
    assert (first.done, first.retried, first.failed) == (1, 1, 1)
    assert user_plugins.NOTIFIED == ["n/1"]
    for _ in range(4):
        kit.clock.advance(10)
        await worker.tick_any()
    poison = await kit.raw_row("n/poison")
    fatal = await kit.raw_row("n/fatal")
    assert poison is not None and fatal is not None
    assert poison["state"] == "failed" and poison["attempts"] == 3
    assert [e["kind"] for e in poison["errors"]] == ["error", "error", "permanent"]
    assert "notification service said no" in poison["errors"][-1]["error"]
    assert fatal["state"] == "failed" and "no such recipient" in fatal["errors"][-1]["error"]


class TestTitleLogContract(ProjectionContract):
    """A user projection checked by the same shipped contract as the built-ins."""

    projection = user_plugins.TitleLog


@pytest.mark.anyio
async def test_a_user_projection_without_apply_many_keeps_the_contract(kit: Kit) -> None:
    await check_projection(user_plugins.ApplyOnly, store=kit.readmodels)


BAD: list[tuple[list[str], dict[str, str], str]] = [
    (["nope"], {}, "projections[0]: unknown projection 'nope'"),
    (["no_such_module_xyz:Thing"], {}, "projections[0]: cannot import 'no_such_module_xyz'"),
    (["tests.support.broken_plugin:X"], {}, "RuntimeError: this plugin cannot be imported"),
    ([f"{TOPIC}:Missing"], {}, "has no 'Missing'"),
    ([f"{TOPIC}:not_a_class"], {}, "is not a class"),
    ([f"{TOPIC}:NoReset"], {}, "NoReset does not fit the projection protocol: needs async reset"),
    ([f"{TOPIC}:SyncApply"], {}, "needs async apply"),
    ([f"{TOPIC}:NoName"], {}, "needs a class attribute `name`"),
    ([f"{TOPIC}:BadCtor"], {}, "constructor must take the read-model store"),
    (["board-reflect", f"{TOPIC}:FakeReflect"], {}, "projections[1]: "
     "'tests.support.user_plugins:FakeReflect' is named 'board-reflect', which clashes with a built-in"),
    ([f"{TOPIC}:TitleLog", f"{TOPIC}:TitleLog"], {}, "projections[1]: "),
    ([f"{TOPIC}:FailingCtor"], {}, "projections[0]: constructing FailingCtor failed: RuntimeError"),
    ([], {"launch": f"{TOPIC}:Notify"}, "handlers.launch: kind 'launch' clashes with a built-in"),
    ([], {"notify": f"{TOPIC}:TitleLog"}, "handlers.notify: TitleLog does not fit the effect handler"),
    ([], {"notify": "notatopic"}, "handlers.notify: 'notatopic' is not a topic"),
    ([], {"notify": f"{TOPIC}:BadCtor"}, "handlers.notify: BadCtor does not fit"),
    ([], {'"no/tify"': f"{TOPIC}:Notify"}, "handlers: 'no/tify' is not an effect kind name"),  # quoted key
]


@pytest.mark.parametrize(("projections", "handlers", "message"), BAD)
def test_bad_plugin_is_one_line_exit_2(
    projections: list[str], handlers: dict[str, str], message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = write_config(tmp_path, projections, handlers)
    assert main(["run", "--config", cfg], factory=lambda cfg, **_: _yield(MemoryBackend())) == 2
    err = capsys.readouterr().err
    assert err.startswith("board-outbox: config error: ") and err.count("\n") == 1, err
    assert message in err, err


@pytest.mark.parametrize(
    ("group", "name", "value", "projections", "message"),
    [
        ("board_outbox.projections", "board-reflect", f"{TOPIC}:TitleLog", ["board-reflect"],
         "'board-reflect' is both a built-in projection and an entry point"),
        ("board_outbox.projections", "titles", f"{TOPIC}:TitleLog", ["titles"],
         "entry point 'titles' loads a projection named 'title-log'"),
        ("board_outbox.projections", "x", "no_such_module_xyz:X", ["x"],
         "cannot load entry point board_outbox.projections:x"),
        ("board_outbox.handlers", "projection", f"{TOPIC}:Notify", [],
         "entry point board_outbox.handlers:projection: kind 'projection' clashes with a built-in"),
        ("board_outbox.handlers", "notify", f"{TOPIC}:NoReset", [],
         "entry point board_outbox.handlers:notify: NoReset does not fit the effect handler"),
    ],
)
def test_bad_entry_point_is_one_line_exit_2(
    group: str, name: str, value: str, projections: list[str], message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    fake_entry_points(monkeypatch, group, name, value)
    cfg = write_config(tmp_path, projections)
    assert main(["run", "--config", cfg], factory=lambda cfg, **_: _yield(MemoryBackend())) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
