"""``board-outbox subscriptions`` (P6): add, list, show, edit, disable, enable and remove, each
write checked by the service's own decoder (a bad rule, bot, kind, coalesce window or priority
is one line, exit 2, nothing written), conditional on the revision read, and audited in the
document; and the change reaching a running service, on the memory backend and on the wire."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import Card
from board_outbox.model.errors import UsageError
from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscriptions import Subscription
from board_outbox.service.config import load_config
from board_outbox.service.runtime import Service
from board_outbox.surface import subscribing
from board_outbox.surface.cli import main
from tests.test_admin_cli import factory_for

T = "acme"


def run_cli(backend: MemoryBackend, *args: str) -> int:
    try:
        return main(["subscriptions", *args], factory=factory_for(backend))
    except SystemExit as exc:  # argparse's own one-line refusal (and its usage line)
        return int(exc.code or 0)


def test_add_list_show_edit_disable_enable_rm_each_audited(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    b = MemoryBackend()
    assert run_cli(b, "add", "ship", "--tenant", T, "--bot", "shipper", "--event-type",
                   "card.moved", "--column", "Done", "--label", "ready", "--priority", "3",
                   "--coalesce", "5:60", "--by", "ana") == 0
    assert "subscription ship added (tenant acme): launch shipper, on card.moved, in column " \
           "'Done', labelled ready, priority 3, coalesce 5s/60s" in capsys.readouterr().out
    sub = b.subs._subs["ship"]
    assert (sub.rule.column, sub.rule.labels_all, sub.priority) == ("Done", ("ready",), 3)
    assert sub.coalesce is not None and sub.coalesce.max_wait_seconds == 60

    assert run_cli(b, "edit", "ship", "--any-column", "--priority", "-2", "--no-coalesce",
                   "--max-in-flight", "4", "--by", "bo") == 0
    out = capsys.readouterr().out
    assert "priority 3 -> -2" in out and "rule.column 'Done' -> None" in out
    sub = b.subs._subs["ship"]
    assert (sub.rule.column, sub.priority, sub.coalesce, sub.max_in_flight) == (None, -2, None, 4)
    assert sub.rule.event_types == ("card.moved",)  # not given: kept

    assert run_cli(b, "disable", "ship", "--by", "cy") == 0
    assert not b.subs._subs["ship"].enabled
    assert run_cli(b, "disable", "ship") == 0
    assert "was disabled already: nothing written" in capsys.readouterr().out
    assert run_cli(b, "enable", "ship", "--by", "cy", "--json") == 0
    capsys.readouterr()

    assert run_cli(b, "show", "ship", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["subscription"]["priority"] == -2 and shown["rev"] == 4
    assert [(a["action"], a["by"]) for a in shown["audit"]] == [
        ("add", "ana"), ("edit", "bo"), ("disable", "cy"), ("enable", "cy")]
    assert run_cli(b, "show", "ship") == 0
    assert "edit     by bo: " in capsys.readouterr().out

    assert run_cli(b, "add", "other", "--tenant", "t2", "--bot", "x") == 0
    capsys.readouterr()
    assert run_cli(b, "list", "--tenant", T) == 0
    out = capsys.readouterr().out
    assert "ship" in out and "other" not in out and "1 subscription" in out
    assert run_cli(b, "list", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert [v["sub_id"] for v in listed["subscriptions"]] == ["other", "ship"]
    assert listed["bad_documents"] == []

    # rm prints the document; add --file restores it from what `show --json` printed
    saved = tmp_path / "ship.json"
    assert run_cli(b, "show", "ship", "--json") == 0
    saved.write_text(capsys.readouterr().out)
    assert run_cli(b, "rm", "ship", "--yes", "--by", "dee") == 0
    assert "removed; its document was {" in capsys.readouterr().out
    assert "ship" not in b.subs._subs
    assert run_cli(b, "add", "--file", str(saved), "--by", "dee") == 0
    assert b.subs._subs["ship"] == sub


@pytest.mark.parametrize(("args", "message"), [
    (["add", "s", "--tenant", T, "--bot", "b", "--priority", "11"],
     "--priority: expected a whole number from -10 to 10, got 11"),
    (["add", "s", "--tenant", T, "--bot", "b", "--coalesce", "60:5"],
     "coalesce quiet_seconds 60.0 is above max_wait_seconds 5.0"),
    (["add", "s", "--tenant", T, "--bot", "b", "--coalesce", "5"], "expected QUIET:MAX_WAIT"),
    (["add", "s", "--tenant", T, "--bot", "b", "--coalesce", "0:5"], "coalesce.quiet_seconds"),
    (["add", "s", "--tenant", T, "--bot", "b", "--coalesce", "5:100000"],
     "coalesce.max_wait_seconds"),
    (["add", "s", "--tenant", T, "--bot", "b", "--kind", "notify"],
     "no handler runs effect kind 'notify'"),
    (["add", "s", "--tenant", T, "--bot", "b", "--kind", "projection"],
     "projection rows come from the configured projections"),
    (["add", "s", "--tenant", T, "--bot", "b", "--kind", "notify", "--coalesce", "5:60",
      "--force"], "coalesce applies to launch subscriptions only"),
    (["add", "s 1", "--tenant", T, "--bot", "b"], "invalid subscription id 's 1'"),
    (["add", "s", "--tenant", "a/b", "--bot", "b"], "invalid tenant 'a/b'"),
    (["add", "s", "--tenant", T, "--bot", " b"], "invalid bot ' b'"),
    (["add", "s", "--tenant", T, "--bot", "b\x07"], "invalid bot"),
    (["add", "s", "--tenant", T, "--bot", "b", "--event-type", ""], "event type ''"),
    (["add", "s", "--tenant", T, "--bot", "b", "--column", "x\ny"], "column"),
    (["add", "s", "--tenant", T, "--bot", "b", *["--label", "l"] * 101],
     "rule.labels_all has 101 entries (at most 100)"),
    (["add", "s", "--tenant", T, "--bot", "b", "--max-per-second", "0.0001"],
     "below the slowest rate"),
    (["add", "s", "--tenant", T, "--bot", "b", "--max-in-flight", "5000"],
     "expected 0 (no limit) to 1000"),
    (["add", "s", "--tenant", T], "give --bot"),
    (["add", "s", "--tenant", T, "--bot", "b", "--file", "x.json"], "--file or the flags"),
    (["add", "taken", "--tenant", T, "--bot", "b"], "exists already"),
    (["edit", "taken"], "nothing to change"),
    (["edit", "taken", "--column", "x", "--any-column"], "--any-column clears"),
    (["edit", "taken", "--priority", "99"], "from -10 to 10"),
    (["edit", "nope", "--priority", "1"], "no subscription 'nope'"),
    (["show", "nope"], "no subscription 'nope'"),
    (["show", "a/b"], "invalid subscription id"),
    (["list", "--tenant", "a/b"], "invalid tenant"),
    (["rm", "taken"], "confirm with --yes"),
    (["disable", "taken", "--by", "x" * 300], "--by is 300 characters long"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        args: list[str], message: str) -> None:
    monkeypatch.setattr(sys, "stdin", open(os.devnull))  # noqa: SIM115 - rm must not ask
    b = MemoryBackend()
    taken = Subscription(sub_id="taken", tenant_id=T, bot="b")
    anyio.run(b.subs.put, taken)
    assert run_cli(b, *args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    assert b.subs._subs == {"taken": taken}


def test_a_file_is_held_to_the_same_decoder(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    b = MemoryBackend()
    f = tmp_path / "s.json"
    for doc, message in (
            ({"sub_id": "s", "tenant_id": T, "bot": "b", "prioritty": 1}, "unknown field 'prioritty'"),
            ({"sub_id": "s", "tenant_id": T, "bot": "b", "rule": {"colum": "x"}},
             "unknown rule field 'colum'"),
            ({"sub_id": "s", "tenant_id": T, "bot": "b", "priority": "high"},
             "priority: expected `int`, got `str`"),
            ({"sub_id": "s", "tenant_id": T, "bot": "b", "enabled": "yes"}, "enabled"),
            ({"sub_id": "s", "tenant_id": T}, "missing required field `bot`"),
            ([1, 2], "expected a JSON object")):
        f.write_text(json.dumps(doc))
        assert run_cli(b, "add", "--file", str(f)) == 2, doc
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, (doc, err)
    f.write_text("{not json")
    assert run_cli(b, "add", "--file", str(f)) == 2
    assert "not JSON" in capsys.readouterr().err
    assert run_cli(b, "add", "--file", str(tmp_path / "missing.json")) == 2
    assert "No such file" in capsys.readouterr().err
    f.write_text(json.dumps({"sub_id": "s", "tenant_id": T, "bot": "b"}))
    assert run_cli(b, "add", "other", "--file", str(f)) == 2
    assert "differs from the file's sub_id" in capsys.readouterr().err
    assert b.subs._subs == {}


@pytest.mark.anyio
async def test_a_write_on_a_stale_revision_is_refused_and_nothing_is_lost() -> None:
    """Two operators read the same subscription; the second write is refused (``Changed``,
    exit 1 on the command line), the first one stands."""
    b = MemoryBackend()
    stores = b.stores()
    await subscribing.add(stores, Subscription(sub_id="s", tenant_id=T, bot="b"), by="ana",
                          now=1.0)
    first, second = await subscribing.record(stores, "s"), await subscribing.record(stores, "s")
    assert first.sub is not None and second.sub is not None
    import msgspec

    await subscribing.replace(stores, first, msgspec.structs.replace(first.sub, priority=5),
                              by="ana", now=2.0)
    with pytest.raises(subscribing.Changed, match="changed or was removed since it was read"):
        await subscribing.replace(stores, second, msgspec.structs.replace(second.sub, bot="x"),
                                  by="bo", now=3.0)
    assert stores.sub_admin is not None
    assert not await stores.sub_admin.remove("s", second.rev)  # the remove is fenced too
    now = await subscribing.record(stores, "s")
    assert now.sub == msgspec.structs.replace(first.sub, priority=5) and now.rev == 2
    with pytest.raises(UsageError, match="its id and tenant cannot change"):
        await subscribing.replace(stores, now, msgspec.structs.replace(now.sub, tenant_id="t2"),
                                  by="bo", now=4.0)


# --- the change reaches a running service ------------------------------------------------


async def _rows_of(backend: MemoryBackend, sub_id: str) -> list[dict[str, Any]]:
    return [d for d in backend.outbox.all_docs() if d.get("sub_id") == sub_id]


@pytest.mark.anyio
async def test_a_subscription_added_by_the_cli_materializes_rows_on_a_running_service() -> None:
    """Memory: a service runs; the CLI adds a subscription; the next event has its row. The CLI
    disables it; the event after that has none."""
    b = MemoryBackend()
    await b.board.put(Card(tenant_id=T, card_id="c", column="Done"))
    cfg = load_config(env={}, tail={"poll_interval_seconds": 0.05, "seed": "earliest"},
                      worker={"idle_seconds": 0.02}, projections=[])
    service = Service(b.stores(), cfg)

    def cli(*args: str) -> int:
        return run_cli(b, *args)

    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        await anyio.sleep(0.1)  # the service is polling: it knows no tenant yet
        assert await anyio.to_thread.run_sync(
            cli, "add", "ship", "--tenant", T, "--bot", "shipper", "--event-type",
            "card.moved") == 0
        seq = await b.events.emit(T, "card.moved", "c")
        with anyio.fail_after(10):
            while not [d for d in await _rows_of(b, "ship") if d["seq"] == seq
                       and d["state"] == "done"]:
                await anyio.sleep(0.02)
        assert [d["seq"] for d in await _rows_of(b, "ship")] == [seq]
        assert [r.bot for r in b.launcher.launches] == ["shipper"]
        assert await anyio.to_thread.run_sync(cli, "disable", "ship") == 0
        later = await b.events.emit(T, "card.moved", "c")
        with anyio.fail_after(10):
            while (await b.cursors.get(T) or 0) < later:
                await anyio.sleep(0.02)
        assert [d["seq"] for d in await _rows_of(b, "ship")] == [seq]  # none for `later`
        service.stop()


def test_a_subscription_added_by_the_cli_materializes_rows_on_the_wire(
        live_uri: str, tmp_path: Path) -> None:
    """The wire: the real command (its own process, the configured store) adds a subscription
    while a service runs on the same database; the next event's row is materialized and run."""
    import uuid

    from board_outbox.service.backends import open_backend

    name = f"subs_{uuid.uuid4().hex[:8]}"
    conf = tmp_path / "c.toml"
    conf.write_text(f'projections = []\n[store]\nbackend = "mongo"\nuri = "{live_uri}"\n'
                    f'database = "{name}"\n[tail]\npoll_interval_seconds = 0.1\n'
                    'seed = "earliest"\n')
    cfg = load_config(conf, env={})

    async def scenario() -> None:
        async with open_backend(cfg, ensure_schema=True) as stores:
            service = Service(stores, cfg)
            await stores.cards.put(Card(tenant_id=T, card_id="c"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(service.run)
                proc = await anyio.run_process(
                    [sys.executable, "-m", "board_outbox", "subscriptions", "add", "ship",
                     "--tenant", T, "--bot", "shipper", "--config", str(conf), "--by", "ana"],
                    check=False)
                assert proc.returncode == 0, proc.stderr
                seq = await stores.events.allocate_seq(T)
                await stores.events.insert({"tenant_id": T, "seq": seq, "type": "card.created",
                                            "card_id": "c", "at": time.time()})
                with anyio.fail_after(30):
                    while (row := await stores.outbox.get(f"{T}/{seq}/sub/ship")) is None or \
                            row.state != "done":
                        await anyio.sleep(0.1)
                service.stop()
            rec = await subscribing.record(stores, "ship")
            assert [(a.action, a.by) for a in rec.audit] == [("add", "ana")]
            assert isinstance(rec.audit[0], AuditEntry)

    anyio.run(scenario)
