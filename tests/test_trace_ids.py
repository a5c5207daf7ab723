"""Exemplars carry only valid W3C trace ids (issue 30): a stored trace context is data another
writer may have planted, and ``int(x, 16)`` accepts far more than 32 lowercase hex digits
(``0x`` prefixes, ``_`` separators, surrounding whitespace and newlines, upper case). A trace id
is exactly 32 lowercase hex digits, not all zeros; anything else gives no exemplar."""

from __future__ import annotations

import re
import time

from hypothesis import given
from hypothesis import strategies as st

from board_outbox.engine.telemetry.metrics import Metrics
from board_outbox.engine.telemetry.spans import trace_id_of
from board_outbox.model.board import EventSnapshot
from board_outbox.model.rows import EffectRow, TraceContext
from board_outbox.surface.http.metrics import exposition

W3C = re.compile(r"[0-9a-f]{32}")
SPAN = "b7ad6b7169203331"
HEX = st.text(alphabet="0123456789abcdef", min_size=32, max_size=32)
PLANTED = [
    "0x" + "c" * 30, "c" * 31 + "\n", "\n" + "c" * 31, " " + "c" * 31, "C" * 32,
    "cccc_ccccccccccccccccccccccccccc", "+" + "c" * 31, "0" * 32, "c" * 31 + "g", "c" * 33,
]


@given(HEX)
def test_a_valid_trace_id_is_read_as_it_is(trace: str) -> None:
    got = trace_id_of(f"00-{trace}-{SPAN}-01")
    assert got == (None if trace == "0" * 32 else trace)


@given(st.text(max_size=40))
def test_whatever_a_traceparent_holds_only_a_w3c_trace_id_comes_out(middle: str) -> None:
    got = trace_id_of(f"00-{middle}-{SPAN}-01")
    assert got is None or (W3C.fullmatch(got) is not None and got != "0" * 32 and got == middle)


def test_planted_trace_ids_give_no_trace_id() -> None:
    for bad in PLANTED:
        assert trace_id_of(f"00-{bad}-{SPAN}-01") is None, repr(bad)


def test_only_valid_trace_ids_are_served_as_exemplars() -> None:
    metrics = Metrics()
    now = time.time()
    good = "4bf92f3577b34da6a3ce929d0e0e4736"
    rows = [EffectRow(tenant_id=f"t{i}", row_key=f"t{i}/1/proj/p", seq=1, kind="projection",
                      projection="p", event=EventSnapshot(seq=1, type="card.created", card_id="c",
                                          at=now - 2),
                      trace=TraceContext(traceparent=f"00-{trace}-{SPAN}-01"))
            for i, trace in enumerate([good, *PLANTED])]
    metrics.rows_done(rows, now)
    _ctype, body = exposition(metrics.prom.registry, "application/openmetrics-text; version=1.0.0")
    served = re.findall(r'# \{trace_id="([^"]*)"\}', body.decode())
    assert served and set(served) == {good}


def test_a_planted_traceparent_parents_no_execute_span() -> None:
    """The execute span's parent comes from the same stored field: a planted trace id, span id
    or flags gives no parent (the span starts its own trace), a valid one gives exactly it."""
    from board_outbox.engine.telemetry.spans import parse_traceparent

    for trace in PLANTED:
        assert parse_traceparent(f"00-{trace}-{SPAN}-01") is None, trace
    for span in ["0x" + "b" * 14, "B" * 16, " " + "b" * 15, "b" * 15 + "\n", "b" * 17]:
        assert parse_traceparent(f"00-{'c' * 32}-{span}-01") is None, span
    for flags in ["0x", "1", " 1", "001", "0G"]:
        assert parse_traceparent(f"00-{'c' * 32}-{SPAN}-{flags}") is None, flags
    ctx = parse_traceparent(f"00-{'c' * 32}-{SPAN}-01")
    assert ctx is not None and ctx.trace_id == int("c" * 32, 16) and ctx.span_id == int(SPAN, 16)
