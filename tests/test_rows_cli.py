"""``board-outbox rows cancel|rerun|find`` (A8) on the memory twins: the plan, the apply with
--yes, the search's JSON, and bad input as one line with exit 2 before any store is opened."""

from __future__ import annotations

import json
import time

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import new_launch_row
from board_outbox.model.subscriptions import Subscription
from board_outbox.surface.cli import main
from tests.test_admin_cli import factory_for


def _backend() -> MemoryBackend:
    backend = MemoryBackend()
    now = time.time()
    rows = []
    for tenant in ("t1", "t2"):
        for seq in (1, 2, 3):
            ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}", at=now)
            row = new_launch_row(tenant, ev, Subscription(sub_id="s", tenant_id=tenant, bot="b"),
                                 now)
            row.state = "done" if seq == 3 else "pending"  # type: ignore[assignment]
            rows.append(row)
    anyio.run(backend.outbox.upsert_rows, rows)
    return backend


def test_cancel_rerun_and_find(capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOARD_OUTBOX_STORE__BACKEND", "memory")
    backend = _backend()
    factory = factory_for(backend)
    assert main(["rows", "cancel", "--filter", "tenant=t1", "--reason", "bot retired",
                 "--dry-run"], factory) == 0
    out = capsys.readouterr().out
    assert "plan: 2 pending rows match tenant=t1" in out and "dry run: nothing changed" in out
    assert main(["rows", "cancel", "--filter", "tenant=t1", "--reason", "bot retired",
                 "--yes"], factory) == 0
    assert "2 of 2 planned rows cancelled" in capsys.readouterr().out
    assert main(["rows", "find", "--state", "cancelled", "--json"], factory) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(r["row_key"] for r in found) == ["t1/1/sub/s", "t1/2/sub/s"]
    assert {r["audit"][-1]["by"] for r in found} != {""}
    assert main(["rows", "rerun", "--filter", "tenant=t2", "--yes"], factory) == 0
    assert "1 of 1 planned rows re-run" in capsys.readouterr().out
    assert main(["rows", "find", "--event", "t2:3"], factory) == 0
    out = capsys.readouterr().out
    assert "t2/3/sub/s/rerun/1" in out and "2 rows: event t2:3" in out


@pytest.mark.parametrize(("argv", "says"), [
    (["rows", "find", "--card", "c1"], "--card needs --tenant"),
    (["rows", "find", "--event", "t1"], "expected TENANT:SEQ"),
    (["rows", "find", "--seq-range", "5..2", "--tenant", "t1"], "A must not be above B"),
    (["rows", "find", "--row-key", "t1/1/sub/s/../x"], "is not a row key"),
    (["rows", "find", "--state", "gone"], "--state 'gone': one of"),
    (["rows", "cancel", "--filter", "tenant=a/b", "--reason", "x"], "invalid tenant"),
    (["rows", "cancel", "--filter", "tenant=t1", "--reason", " "], "--reason"),
    (["rows", "rerun", "--filter", "$where=1"], "unknown key"),
])
def test_bad_input_is_one_line_exit_2(argv: list[str], says: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    def no_store(*_a: object, **_k: object) -> object:
        raise AssertionError("the store was opened for bad input")

    assert main(argv, no_store) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cancel_include_expired_takes_claimed_rows_whose_lease_ended(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan counts the pending and the expired claimed rows apart and names the live ones it
    leaves; without the flag no claimed row is planned."""
    monkeypatch.setenv("BOARD_OUTBOX_STORE__BACKEND", "memory")
    backend = MemoryBackend()
    now = time.time()
    rows = []
    for seq, (state, lease) in enumerate(
            (("pending", None), ("claimed", now - 60), ("claimed", now + 3600)), start=1):
        ev = EventSnapshot(seq=seq, type="card.created", card_id=f"c{seq}", at=now)
        row = new_launch_row("t1", ev, Subscription(sub_id="s", tenant_id="t1", bot="b"), now)
        row.not_before = now + 3600
        if state == "claimed":
            row.state, row.claim_id, row.lease_until = "claimed", f"holder{seq}", lease
        rows.append(row)
    anyio.run(backend.outbox.upsert_rows, rows)
    factory = factory_for(backend)
    argv = ["rows", "cancel", "--filter", "tenant=t1", "--reason", "bot retired"]
    assert main([*argv, "--dry-run"], factory) == 0
    assert "plan: 1 pending row match" in capsys.readouterr().out
    assert main([*argv, "--include-expired", "--dry-run"], factory) == 0
    out = capsys.readouterr().out
    assert "plan: 2 rows match tenant=t1 include-expired" in out
    assert ("1 pending, 1 claimed with an expired lease (holder presumed dead); 1 claimed with "
            "a live lease left alone") in out
    assert main([*argv, "--include-expired", "--yes"], factory) == 0
    assert "2 of 2 planned rows cancelled" in capsys.readouterr().out
    assert [backend.outbox.raw(r.row_key)["state"] for r in rows] == [  # type: ignore[index]
        "cancelled", "cancelled", "claimed"]


@pytest.mark.parametrize(("argv", "flag"), [
    (["rows", "rerun", "--filter", "tenant=t1", "--include-expired"], "--include-expired"),
    (["dead-letters", "replay", "--filter", "tenant=t1", "--include-expired"], "--include-expired"),
    (["rows", "cancel", "--filter", "tenant=t1", "--reason", "r", "--include-rerun"],
     "--include-rerun"),
    (["dead-letters", "replay", "--filter", "tenant=t1", "--include-rerun"], "--include-rerun"),
])
def test_an_opt_in_off_its_action_is_one_line_exit_2(argv: list[str], flag: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """--include-expired is a cancel's alone, --include-rerun a rerun's: the parser refuses
    either elsewhere before the store is opened."""
    def no_store(*_a: object, **_k: object) -> object:
        raise AssertionError("the store was opened for bad input")

    with pytest.raises(SystemExit) as exc:
        main(argv, no_store)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1


def test_rerun_repeated_leaves_the_rows_rerun_already_unless_include_rerun(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same command twice re-runs each row once: the second plan counts the row and its
    new row as re-run already and takes nothing; --include-rerun re-runs it again (/rerun/2)."""
    monkeypatch.setenv("BOARD_OUTBOX_STORE__BACKEND", "memory")
    backend = _backend()
    factory = factory_for(backend)
    argv = ["rows", "rerun", "--filter", "tenant=t2"]
    assert main([*argv, "--yes"], factory) == 0
    assert "1 of 1 planned rows re-run" in capsys.readouterr().out
    backend.outbox.raw("t2/3/sub/s/rerun/1")["state"] = "done"  # type: ignore[index]  # it ran
    assert main([*argv, "--yes"], factory) == 0
    out = capsys.readouterr().out
    assert "plan: 0 done rows match tenant=t2" in out
    assert "2 more re-run already, left out" in out and "--include-rerun" in out
    assert backend.outbox.raw("t2/3/sub/s/rerun/2") is None
    assert main([*argv, "--include-rerun", "--json", "--dry-run"], factory) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["matched"], plan["already_rerun"]) == (2, 0)
    assert plan["filter"]["include_rerun"] is True
    assert main([*argv, "--include-rerun", "--yes"], factory) == 0
    assert "2 of 2 planned rows re-run" in capsys.readouterr().out
    assert backend.outbox.raw("t2/3/sub/s/rerun/2") is not None
