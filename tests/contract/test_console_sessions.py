"""The console's ``SessionStore`` on every backend (memory, mongomock, the wire): a session is
found while open and unexpired, a closed or expired one is not, and a stored document that does
not parse (planted, hand-edited) is refused and reported, never trusted (issue 30)."""

from __future__ import annotations

import zlib

import pytest

from board_outbox.model.bad_documents import BAD_DOCUMENTS
from board_outbox.model.records import ConsoleSession
from board_outbox.model.service_documents import SESSION_SECONDS, SESSIONS_COLLECTION
from board_outbox.ports import SessionStore
from tests.support.kits import Kit

pytestmark = pytest.mark.anyio


def _sessions(kit: Kit) -> SessionStore:
    assert kit.sessions is not None
    return kit.sessions


async def test_a_session_is_found_while_open_and_unexpired(kit: Kit) -> None:
    store, now = _sessions(kit), kit.clock.now()
    s = ConsoleSession(session_id="h1", token_tag="tag", who="ana", expires_at=now + 60)
    await store.open(s)
    await store.open(ConsoleSession(session_id="h2", token_tag="tag", who="bo",
                                    expires_at=now + 60))
    assert await store.get("h1", now) == s
    assert await store.get("h1", now + 60) is None  # expires_at is the end, exclusive
    assert await store.get("nope", now) is None
    await store.close("h1")
    assert await store.get("h1", now) is None
    assert (await store.get("h2", now)) is not None  # closing one leaves the others
    await store.close("h1")  # closing again: nothing happens


@pytest.mark.parametrize("doc", [
    {"token_tag": "tag", "who": "x", "expires_at": "tomorrow"},
    {"token_tag": "tag", "who": "x", "expires_at": float("inf")},
    {"token_tag": "tag", "who": "x", "expires_at": float("nan")},
    {"token_tag": "tag", "who": "x", "expires_at": True},
    {"token_tag": "", "who": "x", "expires_at": 0.0},
    {"token_tag": 7, "who": "x", "expires_at": 0.0},
    {"token_tag": "tag", "who": ["x"], "expires_at": 0.0},
    {"who": "x", "expires_at": 0.0},
    {"token_tag": "tag", "who": "x", "expires_at": 10 * 86400.0},  # far past one session
])
async def test_a_session_document_that_does_not_parse_is_refused_and_reported(
        kit: Kit, doc: dict[str, object]) -> None:
    assert kit.put_raw_session is not None
    now = kit.clock.now()
    planted = {k: (now + v if k == "expires_at" and type(v) is float and v == v
                   and abs(v) != float("inf") else v) for k, v in doc.items()}
    doc_id = f"{kit.name[-3:]}{zlib.crc32(repr(sorted(doc.items())).encode()):08x}"
    await kit.put_raw_session(doc_id, planted)
    assert await _sessions(kit).get(doc_id, now) is None
    assert any(d.collection == SESSIONS_COLLECTION and d.key == doc_id + "…"
               for d in BAD_DOCUMENTS.current())
    # a good one beside it is still found
    await _sessions(kit).open(ConsoleSession(session_id="good", token_tag="tag", who="ana",
                                             expires_at=now + SESSION_SECONDS))
    assert await _sessions(kit).get("good", now) is not None
