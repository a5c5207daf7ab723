"""``board-outbox pause | resume | paused`` (issue 33) on the memory backend: what each writes
(the pause document and its audit), what each prints, and one line, exit 2, nothing written for
bad input. The replicas' side is in tests/contract/test_pauses.py and tests/test_wire_pause.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from board_outbox.adapters.memory import MemoryBackend
from board_outbox.model.subscriptions import Subscription
from board_outbox.surface.cli import main


def _cli(b: MemoryBackend, *args: str) -> int:
    @asynccontextmanager
    async def factory(cfg: Any, *, ensure_schema: bool = False) -> AsyncIterator[Any]:
        yield b.stores()

    return main(list(args), factory=factory)


def _backend() -> MemoryBackend:
    b = MemoryBackend()
    anyio.run(b.events.emit, "acme", "card.created", "c")
    anyio.run(b.subs.put, Subscription(sub_id="s1", tenant_id="acme", bot="reviewer"))
    return b


def _docs(b: MemoryBackend) -> dict[str, dict[str, Any]]:
    return dict(b.pauses._docs)


def test_pause_list_resume_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    b = _backend()
    assert _cli(b, "paused") == 0
    assert "nothing is paused" in capsys.readouterr().out
    assert _cli(b, "pause", "--tenant", "acme", "--reason", "incident 42", "--by", "ana") == 0
    out = capsys.readouterr().out
    assert out.startswith("paused tenant acme (by ana: incident 42)") and "resume --tenant acme" in out
    assert _cli(b, "pause", "--bot", "deploy bot", "--by", "bo") == 0  # a bot: any name
    assert _cli(b, "pause", "--subscription", "s1", "--by", "bo") == 0
    capsys.readouterr()
    assert _cli(b, "pause", "--tenant", "acme", "--reason", "still", "--by", "cy") == 0
    assert "was paused already; its reason is now: still (by cy)" in capsys.readouterr().out

    assert _cli(b, "paused") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["SCOPE", "KEY", "SINCE", "BY", "REASON"]
    assert [line.split()[:2] for line in table[1:4]] == [
        ["bot", "deploy"], ["subscription", "s1"], ["tenant", "acme"]]
    assert table[3].split()[-2:] == ["cy", "still"]
    assert table[-1] == "3 pauses on"

    assert _cli(b, "paused", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert list(doc) == ["schema", "pauses", "bad_documents"] and doc["schema"] == 1
    assert [(p["scope"], p["key"], p["by"], p["reason"]) for p in doc["pauses"]] == [
        ("bot", "deploy bot", "bo", ""), ("subscription", "s1", "bo", ""),
        ("tenant", "acme", "cy", "still")]

    assert _cli(b, "resume", "--tenant", "acme", "--by", "ana") == 0
    assert capsys.readouterr().out.startswith("resumed tenant acme (by ana)")
    audit = _docs(b)["tenant:acme"]["audit"]
    assert [(a["action"], a["by"], a["detail"]) for a in audit] == [
        ("pause", "ana", "incident 42"), ("pause", "cy", "still"), ("resume", "ana", "")]
    assert _cli(b, "resume", "--tenant", "acme") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tenant acme is not paused" in err
    assert _cli(b, "paused", "--json") == 0
    assert [p["scope"] for p in json.loads(capsys.readouterr().out)["pauses"]] == [
        "bot", "subscription"]


@pytest.mark.parametrize("args, message", [
    (["pause", "--tenant", "a/b"], "invalid tenant_id 'a/b'"),
    (["pause", "--subscription", "s 1"], "invalid subscription id 's 1'"),
    (["pause", "--bot", ""], "invalid bot ''"),
    (["pause", "--bot", " padded"], "invalid bot ' padded'"),
    (["pause", "--bot", "b", "--reason", "x" * 501], "--reason is 501 characters long"),
    (["pause", "--bot", "b", "--reason", "line\nbreak"], "--reason carries a control character"),
    (["resume", "--tenant", "a\tb"], "invalid tenant_id"),
    (["pause", "--tenant", "ghost"], "unknown tenant 'ghost'"),
    (["pause", "--subscription", "nope"], "unknown subscription 'nope'"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
        args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    b = _backend()
    assert _cli(b, *args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert _docs(b) == {}


def test_force_pauses_a_tenant_the_store_does_not_know_yet(
        capsys: pytest.CaptureFixture[str]) -> None:
    b = _backend()
    assert _cli(b, "pause", "--tenant", "newco", "--force", "--by", "ana") == 0
    assert _docs(b)["tenant:newco"]["active"] is True


def test_two_scopes_or_none_are_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    b = _backend()
    with pytest.raises(SystemExit) as exc:
        _cli(b, "pause", "--tenant", "acme", "--bot", "b")
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        _cli(b, "resume")
    assert exc.value.code == 2
    assert "one of the arguments --tenant --subscription --bot is required" in \
        capsys.readouterr().err
    assert _docs(b) == {}


def test_paused_lists_a_bad_pause_document_and_pause_writes_it_whole_again(
        capsys: pytest.CaptureFixture[str]) -> None:
    b = _backend()
    b.pauses.put_raw("tenant:acme", {"scope": "tenant", "key": "acme", "active": "yes", "at": 1})
    assert _cli(b, "paused", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["pauses"] == []
    assert "tenant:acme" in [d["key"] for d in doc["bad_documents"]]  # (the process's list)
    assert _cli(b, "paused") == 0
    assert "malformed pause document tenant:acme: active 'yes'" in capsys.readouterr().err
    assert _cli(b, "pause", "--tenant", "acme", "--by", "ana") == 0
    assert capsys.readouterr().out.startswith("paused tenant acme")  # it was not paused
    assert _cli(b, "paused", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["key"] for p in doc["pauses"]] == ["acme"]
    assert "tenant:acme" not in [d["key"] for d in doc["bad_documents"]]


def test_status_names_the_pauses_on_and_lists_a_bad_pause_document(
        capsys: pytest.CaptureFixture[str]) -> None:
    b = _backend()
    assert _cli(b, "pause", "--tenant", "acme", "--reason", "[red]INC-42[/red]", "--by", "ana") == 0
    b.pauses.put_raw("bot:x", {"scope": "bot", "key": "x", "active": True, "at": "then"})
    capsys.readouterr()
    assert _cli(b, "status") == 0
    out = capsys.readouterr().out
    assert "paused: tenant acme since" in out and "by ana: [red]INC-42[/red]" in out
    assert "malformed board_outbox_pauses document bot:x" in out
    assert _cli(b, "status", "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert "bot:x" in [d["key"] for d in doc["bad_documents"]
                       if d["collection"] == "board_outbox_pauses"]


def test_paused_shows_since_when_a_pause_is_on_not_its_last_change(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A pause whose reason was changed an hour after it went on is on since the first: SINCE
    (and ``since`` in ``--json``) says so, ``at`` stays the last change."""
    b = _backend()
    first, later = 1_800_000_000.0, 1_800_003_600.0
    anyio.run(lambda: b.pauses.pause("tenant", "acme", reason="one", by="ana", at=first))
    anyio.run(lambda: b.pauses.pause("tenant", "acme", reason="two", by="bo", at=later))
    assert _cli(b, "paused") == 0
    row = capsys.readouterr().out.splitlines()[1]
    assert "2027-01-15 08:00:00 UTC" in row and row.split()[-2:] == ["bo", "two"]
    assert _cli(b, "paused", "--json") == 0
    [p] = json.loads(capsys.readouterr().out)["pauses"]
    assert (p["since"], p["at"]) == (first, later)


def test_a_pause_dated_in_milliseconds_is_listed_not_a_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    """R7: ``at: 1e12`` (a JavaScript writer's milliseconds) made ``paused`` raise "year 33658
    is out of range". Now that document pauses nothing and is named, with why; the good pause
    beside it is listed as ever."""
    b = _backend()
    b.pauses.put_raw("tenant:acme", {"scope": "tenant", "key": "acme", "active": True,
                                     "reason": "js", "by": "js", "at": 1e12})
    anyio.run(lambda: b.pauses.pause("bot", "deploy", reason="", by="ana", at=1_800_000_000.0))
    assert _cli(b, "paused") == 0
    out, err = capsys.readouterr()
    assert "bot" in out and "deploy" in out and "1 pause on" in out and "acme" not in out
    assert "malformed pause document tenant:acme: at 1000000000000.0 is out of range" in err
    assert "a millisecond timestamp?" in err and "Traceback" not in err
    from board_outbox.model.bad_documents import BAD_DOCUMENTS

    BAD_DOCUMENTS.resolved("board_outbox_pauses", "tenant:acme")  # the next test's list as ever
