"""The JSON Schemas shipped in the package (``board_outbox/schemas/``, docs/producing.md) held
against the service's decoders, the code that reads each document at the boundary:

- every document a schema allows (generated from the schema by Hypothesis, stored and read back
  as BSON) is read by the service as it is: decoded, with nothing reported;
- every document a schema refuses is refused by the service too (or read with a warning): the
  schema's valid documents with one field changed to a hostile value, removed, or one added
  (Hypothesis again), and every document of the bad-data corpus (tests/test_bad_data.py, its
  cases planted as they are there, then read back from the store);
- the only refusals the schema may add are of fields the service never reads (``UNREAD``: an
  unknown field, which the schema refuses so a misspelt one is caught where it is written; the
  service's and the commands' own bookkeeping), and one named leniency of a reader
  (``LENIENT``);
- the few rules JSON Schema cannot state (a relation between two fields or two documents, a sum
  over a list, a BSON double that holds a whole number) are named in ``BEYOND``: a refusal
  for one of those reasons alone is the only refusal the schema may let by;
- every example on docs/producing.md validates and decodes, and ``check-jsonschema`` (the
  command the page shows, with its ECMAScript regular expressions) agrees with ``jsonschema``
  (Python's) on the examples and on the documents where the two dialects could differ.

A disagreement fails, naming the document, the schema's reason and the decoder's.
"""

from __future__ import annotations

import functools
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
import bson
import jsonschema
import pytest
from bson import json_util
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from board_outbox.adapters.mongo.subscriptions import decode_subscription
from board_outbox.engine.tail.reading import decode_event, snapshot
from board_outbox.engine.telemetry.propagation import stored_context
from board_outbox.model.board import BoardEvent, Card
from board_outbox.model.codec import from_doc
from board_outbox.model.errors import MalformedCard, MalformedDocument
from board_outbox.model.service_documents import seqs_by_tenant
from board_outbox.model.validation import is_seq, tenant_problem
from board_outbox.ports import EventRecord
from tests import test_bad_data as corpus
from tests.support.schema_strategies import from_schema

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "producing.md"
COLLECTIONS = ("board_events", "board_event_counters", "board_cards", "trigger_subscriptions")


@functools.cache
def schema_of(collection: str) -> dict[str, Any]:
    """The schema as the installed package ships it (read once: never change what it returns)."""
    text = (resources.files("board_outbox") / "schemas" / f"{collection}.schema.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


VALIDATORS = {c: jsonschema.Draft202012Validator(schema_of(c)) for c in COLLECTIONS}


def as_json(doc: Any) -> Any:
    """A stored document as MongoDB's relaxed Extended JSON writes it (mongoexport's form)."""
    return json.loads(json_util.dumps(doc, json_options=json_util.RELAXED_JSON_OPTIONS))


def schema_problem(collection: str, doc: Any) -> str | None:
    err = jsonschema.exceptions.best_match(VALIDATORS[collection].iter_errors(as_json(doc)))
    return None if err is None else f"{'/'.join(map(str, err.absolute_path))}: {err.message}"[:300]


# --- the service's reading of each document ---------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    state: str  # ok | tolerated (read, with one warning) | refused (ignored, or never read)
    why: str = ""


OK = Verdict("ok")


def refused(why: object) -> Verdict:
    return Verdict("refused", str(why)[:300])


def read_event(doc: dict[str, Any], counter: int | None = None) -> Verdict:
    """As the tail reads an event (``reading.read_batch``): its seq, its tenant, the document,
    its time and its producer's trace context; ``counter``: its tenant's allocated seq."""
    seq, tenant = doc.get("seq"), doc.get("tenant_id")
    if not is_seq(seq):
        return refused(f"seq {seq!r} is not an integer seq")
    if seq == 0:
        return refused("seq 0 is never read: the first seq is 1")
    if (problem := tenant_problem(tenant)) is not None:
        return refused(f"tenant not drained: {problem}")
    if counter is not None and seq > counter:
        return refused(f"seq {seq} is beyond the tenant's allocated counter {counter}")
    assert isinstance(tenant, str)
    try:
        ev = decode_event(tenant, EventRecord(seq, doc))
    except MalformedDocument as exc:
        return refused(exc)
    if ev.at == 0.0 and doc.get("at", 0) != 0:
        return Verdict("tolerated", f"at {doc.get('at')!r} read as no time")
    _, problem = stored_context(doc.get("trace"))
    if problem is not None:
        return Verdict("tolerated", f"trace: {problem}")
    return OK


def read_counter(doc: dict[str, Any]) -> Verdict:
    """As ``heads``/``allocated_seq`` read a counter, and the tail its tenant."""
    if not seqs_by_tenant("board_event_counters", [(doc.get("_id"), doc.get("seq"))]):
        return refused(f"_id {doc.get('_id')!r} / seq {doc.get('seq')!r} is not a tenant's seq")
    if (problem := tenant_problem(doc["_id"])) is not None:
        return refused(f"tenant not drained: {problem}")
    return OK


def read_card(doc: dict[str, Any]) -> Verdict:
    """As ``get_many`` reads a card under its key, and ``snapshot`` takes it into an event."""
    try:
        card = from_doc(doc, Card, MalformedCard)
    except MalformedDocument as exc:
        return refused(exc)
    if (problem := tenant_problem(card.tenant_id)) is not None:
        return refused(f"tenant not drained: {problem}")
    if not card.card_id:
        return refused("card_id '' is never an event's (an event's card_id is never empty)")
    if doc.get("_id") != f"{card.tenant_id}/{card.card_id}":
        return refused(f"_id {doc.get('_id')!r} is not the key of tenant {card.tenant_id!r} "
                       f"card {card.card_id!r}")
    ev = BoardEvent(tenant_id=card.tenant_id, seq=1, type="card.updated", card_id=card.card_id)
    try:
        snapshot(ev, {card.card_id: card})
    except MalformedDocument as exc:
        return refused(exc)
    return OK


def read_subscription(doc: dict[str, Any]) -> Verdict:
    """As ``list_for_tenant`` reads a tenant's subscriptions (and the tail, its tenant)."""
    try:
        decode_subscription(doc)
    except MalformedDocument as exc:
        return refused(exc)
    if (problem := tenant_problem(doc.get("tenant_id"))) is not None:
        return refused(f"tenant not drained: {problem}")
    return OK


READERS: dict[str, Callable[[dict[str, Any]], Verdict]] = {
    "board_events": read_event, "board_event_counters": read_counter,
    "board_cards": read_card, "trigger_subscriptions": read_subscription}


# the fields a schema holds to "integer" that the service reads as a true int: JSON Schema's
# integer is any number with no fraction, so a BSON double 2.0 passes it (relaxed Extended JSON
# writes it 2.0, and no JSON Schema keyword tells it from 2)
INTEGER_FIELDS = {"board_events": ("seq",), "board_event_counters": ("seq",),
                  "trigger_subscriptions": ("priority", "max_in_flight")}


def _whole_double(collection: str) -> Callable[[dict[str, Any]], bool]:
    def trait(doc: dict[str, Any]) -> bool:
        return any(isinstance(v := doc.get(name), float) and v.is_integer()
                   for name in INTEGER_FIELDS.get(collection, ()))
    return trait


def _duplicate_tracestate_keys(doc: dict[str, Any]) -> bool:
    trace = doc.get("trace")
    state = trace.get("tracestate") if isinstance(trace, dict) else None
    if not isinstance(state, str):
        return False
    keys = [m.split("=", 1)[0].strip(" \t") for m in state.split(",") if m.strip(" \t")]
    return len(keys) != len(set(keys))


def _labels_over_sum(doc: dict[str, Any]) -> bool:
    labels = doc.get("labels")
    return isinstance(labels, list) and sum(len(x) for x in labels if isinstance(x, str)) > 65536


def _quiet_above_wait(doc: dict[str, Any]) -> bool:
    c = doc.get("coalesce")
    return isinstance(c, dict) and c.get("quiet_seconds", 0) > c.get("max_wait_seconds", 0)


# (collection, reason the decoder gives, the document's trait JSON Schema cannot see): the only
# refusals (or warnings) the schema may let by, each only with its trait
BEYOND: list[tuple[str, str, Callable[[dict[str, Any]], bool]]] = [
    ("board_events", "beyond the tenant's allocated counter", lambda d: True),  # two documents
    ("board_events", "is not an integer seq", _whole_double("board_events")),
    ("board_events", "tracestate is not a W3C tracestate", _duplicate_tracestate_keys),
    ("board_event_counters", "is not a tenant's seq", _whole_double("board_event_counters")),
    ("board_cards", "labels of", _labels_over_sum),
    ("board_cards", "is not the key of tenant", lambda d: True),  # _id vs tenant_id/card_id
    ("trigger_subscriptions", "is above max_wait_seconds", _quiet_above_wait),
    ("trigger_subscriptions", "got `float`", _whole_double("trigger_subscriptions")),
]

# fields the service's reading of a document never looks at, which the schema describes all the
# same: the service's own record on a card (which launch spent which one-shot labels), and the
# commands' revision and audit of a subscription (read by the commands, leniently)
OWN_FIELDS = {"board_cards": {"consumed"}, "trigger_subscriptions": {"rev", "audit"}}


def unread(collection: str, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` without what the service never reads: the schema's own fields (``OWN_FIELDS``)
    and fields the schema does not know, where it refuses those (``additionalProperties``
    false: a counter, a subscription and its rule). A schema may refuse a document the service
    reads only for something this removes."""
    schema = schema_of(collection)
    props = schema["properties"]
    own = OWN_FIELDS.get(collection, set())
    keep = (lambda k: k in props) if schema.get("additionalProperties") is False else \
        (lambda k: True)
    out = {k: v for k, v in doc.items() if keep(k) and k not in own}
    rule = out.get("rule")
    if collection == "trigger_subscriptions" and isinstance(rule, dict):
        known = props["rule"]["properties"]
        out["rule"] = {k: v for k, v in rule.items() if k in known}
    return out


def disagreement(collection: str, doc: dict[str, Any], verdict: Verdict) -> str | None:
    """Why the schema and the service's reading of ``doc`` disagree (None: they agree)."""
    problem = schema_problem(collection, doc)
    if verdict.state == "ok" and problem is not None:
        if schema_problem(collection, unread(collection, doc)) is None:
            return None  # refused only for what the service never reads
        return f"the service reads it, the schema refuses it: {problem}"
    if verdict.state != "ok" and problem is None:
        if any(c == collection and reason in verdict.why and trait(doc)
               for c, reason, trait in BEYOND):
            return None
        return f"the service {verdict.state} it ({verdict.why}), the schema allows it"
    return None


# --- 1. what a schema allows, the service reads --------------------------------------------------


@functools.cache
def allowed(collection: str) -> st.SearchStrategy[dict[str, Any]]:
    return from_schema(schema_of(collection))


def _stored(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as the store gives it back (BSON: int64 bounds, no NUL in names...)."""
    return bson.decode(bson.encode(doc))


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_every_document_a_schema_allows_is_read_as_it_is(collection: str) -> None:
    seen: list[int] = []

    @settings(max_examples=100, deadline=None, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(allowed(collection))
    def check(doc: dict[str, Any]) -> None:
        if collection == "board_cards":  # the key is the fields' relation (BEYOND): made here
            doc = {**doc, "_id": f"{doc['tenant_id']}/{doc['card_id']}"}
        stored = _stored(doc)
        assert schema_problem(collection, stored) is None, stored
        verdict = READERS[collection](stored)
        if verdict.state != "ok":
            trait = next((t for c, r, t in BEYOND if c == collection and r in verdict.why), None)
            assert trait is not None and trait(stored), (verdict, stored)
        else:
            seen.append(len(stored))

    check()
    assert len(seen) >= 50  # most were read as they are, not let by as BEYOND the schema


# values a careless or hostile writer stores: wrong types, the edges of every range, ids that
# are not ids, text with a newline or a control character, lists too long, objects that are not
HOSTILE_VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 11, -11, 1001, 2**31, 2**63 - 1, -(2**63),
    0.0, -0.5, 2.5, 3.0, 1e-4, 1e20, -1e20, 253402300800.0, math.nan, math.inf, -math.inf,
    "", " ", "a/b", "x\n", "\x00", "\x85", " lead", "trail ", "launch", "projection", "x" * 201,
    "card.created", "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    "00-" + "0" * 32 + "-" + "b" * 16 + "-01", "k=v,k=w",
    [], [""], ["a", None], [1], ["x" * 201], ["l"] * 101, ["x" * 70] * 1000,
    {}, {"quiet_seconds": 0, "max_wait_seconds": 5}, {"quiet_seconds": 5.0}, {"x": 1},
    {"traceparent": "a"}, {"event_types": "card.moved"}, {"labels_all": [1]},
]
HOSTILE = st.sampled_from(HOSTILE_VALUES)


def _fields(doc: dict[str, Any], base: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every field's path, nested objects' fields included."""
    out: list[tuple[str, ...]] = []
    for k, v in doc.items():
        out.append((*base, k))
        if isinstance(v, dict):
            out += _fields(v, (*base, k))
    return out


@st.composite
def changed(draw: st.DrawFn, collection: str) -> tuple[dict[str, Any], str]:
    """A document the schema allows, with one field (nested ones too, and the schema's optional
    fields it left out) set to a hostile value or removed, or one field added."""
    doc = _stored(draw(allowed(collection)))
    if collection == "board_cards":
        doc["_id"] = f"{doc['tenant_id']}/{doc['card_id']}"
    paths = _fields(doc) + [(p,) for p in schema_of(collection)["properties"]]
    objects = [()] + [p for p in _fields(doc) if isinstance(_at(doc, p), dict)]
    paths += [(*p, "added") for p in objects]
    path = draw(st.sampled_from(sorted(set(paths))))
    parent = _at(doc, path[:-1])
    if path[-1] != "added" and draw(st.booleans()):
        parent.pop(path[-1], None)
        return doc, f"removed {'.'.join(path)}"
    parent[path[-1]] = draw(HOSTILE)
    if collection == "board_cards" and path in (("tenant_id",), ("card_id",)):
        tenant, card = doc.get("tenant_id"), doc.get("card_id")
        if isinstance(tenant, str) and isinstance(card, str):
            doc["_id"] = f"{tenant}/{card}"  # the key follows (a mismatch is BEYOND)
    return doc, f"set {'.'.join(path)}"


def _at(doc: dict[str, Any], path: tuple[str, ...]) -> Any:
    for name in path:
        doc = doc[name]
    return doc


def _changes(doc: dict[str, Any], collection: str) -> list[tuple[dict[str, Any], str]]:
    """``doc`` with each of its fields (nested ones too, and the schema's fields it leaves out)
    set to each hostile value, or removed, and with a field added to each of its objects."""
    import copy

    paths = _fields(doc) + [(p,) for p in schema_of(collection)["properties"]]
    rule = schema_of(collection)["properties"].get("rule", {}).get("properties", {})
    paths += [("rule", p) for p in rule if isinstance(doc.get("rule"), dict)]
    objects = [()] + [p for p in _fields(doc) if isinstance(_at(doc, p), dict)]
    out: list[tuple[dict[str, Any], str]] = []
    for path in sorted(set(paths)):
        for value in [*HOSTILE_VALUES, "removed"]:
            changed_doc = copy.deepcopy(doc)
            parent = _at(changed_doc, path[:-1])
            if value == "removed":
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = value
            out.append((changed_doc, f"{'.'.join(path)} = {value!r:.40}"))
    for path in objects:
        changed_doc = copy.deepcopy(doc)
        _at(changed_doc, path)["added"] = 1
        out.append((changed_doc, f"{'.'.join(path) or 'the document'} + a field"))
    return out


def _minimal(collection: str, example: dict[str, Any]) -> dict[str, Any]:
    """``example`` with only the fields its schema requires."""
    return {k: example[k] for k in schema_of(collection)["required"]}


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_each_field_of_each_page_example_changed_is_judged_alike(collection: str) -> None:
    """Every field of the page's example (and of that example cut to its required fields), set
    to every hostile value or removed, and a field added: the schema and the service agree."""
    (example,) = [doc for c, doc in page_examples() if c == collection]
    bad, refused = [], 0
    for base in (example, _minimal(collection, example)):
        for doc, change in _changes(base, collection):
            try:
                stored = _stored(doc)
            except (bson.errors.InvalidDocument, OverflowError):
                continue  # the store could not hold it: no document
            verdict = READERS[collection](stored)
            if (why := disagreement(collection, stored, verdict)) is not None:
                bad.append(f"{change}: {why}")
            refused += verdict.state != "ok"
    assert not bad, "\n".join(bad[:20])
    assert refused >= 50  # it judged refusals, not only harmless changes


@pytest.mark.parametrize("collection", COLLECTIONS)
def test_every_document_a_schema_refuses_the_service_refuses(collection: str) -> None:
    both: list[str] = []

    @settings(max_examples=150, deadline=None, database=None, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(changed(collection))
    def check(case: tuple[dict[str, Any], str]) -> None:
        doc, change = case
        try:
            stored = _stored(doc)
        except (bson.errors.InvalidDocument, OverflowError):
            return  # the store could not hold it: no document
        verdict = READERS[collection](stored)
        why = disagreement(collection, stored, verdict)
        assert why is None, f"{change}: {why}\n{json_util.dumps(stored)[:400]}"
        if verdict.state != "ok":
            both.append(change)

    check()
    # a change often breaks the document: the test judged refusals, not only harmless changes
    # (from about 1 in 5 of the 150 for an event to 4 in 5 for a counter)
    assert len(both) >= 15, both


# --- 2. the bad-data corpus: judged alike ------------------------------------------------------

# the corpus's cases whose bad document is one of these four (the others plant rows, cursors,
# pauses, limit slots: the service's own collections, which have no schema)
PRODUCER_CASES = ("event-", "card-", "sub-", "tenant-")


async def _plant_corpus() -> dict[str, list[tuple[str, dict[str, Any], Verdict]]]:
    """Every case of the corpus planted as the corpus plants it (the Mongo adapters over
    mongomock, raw documents as they are), then each document of the four collections read
    back: case id -> [(collection, document, the service's verdict)]."""
    rig = await corpus._mongomock_rig()
    rig.healthy = "schema-healthy"
    out: dict[str, list[tuple[str, dict[str, Any], Verdict]]] = {}
    for case in corpus.CASES:
        if case.memory_only:
            continue  # a value BSON cannot hold (a Python Decimal): no stored document
        t = f"x-{case.id}"
        await case.plant(rig, t)
        counters = {d["_id"]: d.get("seq") for d in await rig.db["board_event_counters"].find(
            {}).to_list(None)}
        docs = []
        for coll in COLLECTIONS:
            for doc in await rig.db[coll].find({}).to_list(None):
                owner = doc.get("tenant_id") if coll == "board_events" else doc.get("_id")
                if not (isinstance(owner, str) and owner.startswith(t)):
                    continue
                doc = _stored(doc)
                if coll == "board_events":
                    c = counters.get(owner)
                    verdict = read_event(doc, c if isinstance(c, int) else None)
                else:
                    verdict = READERS[coll](doc)
                docs.append((coll, doc, verdict))
        out[case.id] = docs
    return out


@pytest.fixture(scope="module")
def planted() -> dict[str, list[tuple[str, dict[str, Any], Verdict]]]:
    return anyio.run(_plant_corpus)


def test_every_corpus_document_is_judged_alike(
        planted: dict[str, list[tuple[str, dict[str, Any], Verdict]]]) -> None:
    judged = [(case, coll, doc, v) for case, docs in planted.items() for coll, doc, v in docs]
    assert len(judged) >= 150 and {c for _, c, _, _ in judged} == set(COLLECTIONS)
    bad = [f"{case} {coll} {json_util.dumps(doc)[:200]}: {why}"
           for case, coll, doc, v in judged if (why := disagreement(coll, doc, v))]
    assert not bad, "\n".join(bad)


def test_every_producer_case_of_the_corpus_plants_a_document_both_refuse(
        planted: dict[str, list[tuple[str, dict[str, Any], Verdict]]]) -> None:
    """A case about events, cards, subscriptions or tenants that ends in a log line has its bad
    document here, and the service does not simply read it; one that flows has none."""
    cases = {c.id: c for c in corpus.CASES}
    checked = 0
    for case_id, docs in planted.items():
        if not case_id.startswith(PRODUCER_CASES) or cases[case_id].expect == "dead":
            continue
        not_read = [(coll, v) for coll, _, v in docs if v.state != "ok"]
        if cases[case_id].expect == "flows":
            assert not_read == [], case_id
        else:
            assert not_read, f"{case_id}: the service reads every document it planted"
        checked += 1
    assert checked >= 45


# hand-made documents where the two regex dialects or JSON Schema's integer could slip
EXTRA: list[tuple[str, dict[str, Any]]] = [
    *[("board_events", {"tenant_id": bad, "seq": 1, "type": "card.created", "card_id": "c"})
      for bad in ("abc\n", "abc\r\n", "\nabc", "a b", "a/b", "", "t" * 201)],
    ("board_events", {"tenant_id": "acme", "seq": 0, "type": "card.created", "card_id": "c"}),
    ("board_events", {"tenant_id": "acme", "seq": 2.0, "type": "card.created", "card_id": "c"}),
    ("board_events", {"tenant_id": "acme", "seq": 3, "type": "card.created", "card_id": "c",
                      "trace": {"traceparent": "00-" + "a" * 32 + "-" + "0" * 16 + "-01"}}),
    ("board_events", {"tenant_id": "acme", "seq": 3, "type": "card.created", "card_id": "c",
                      "at": float("nan")}),
    ("board_event_counters", {"_id": "acme\n", "seq": 4}),
    ("board_event_counters", {"_id": "acme", "seq": -1}),
    ("board_event_counters", {"_id": "acme", "seq": "4"}),
    ("board_event_counters", {"_id": "acme", "seq": bson.Decimal128("4")}),
    ("board_cards", {"_id": "acme/c", "tenant_id": "acme", "card_id": "c",
                     "labels": ["x" * 70] * 1000}),
    ("board_cards", {"_id": "acme/c", "tenant_id": "acme", "card_id": "c", "labels": [None]}),
    ("trigger_subscriptions", {"sub_id": "s/1", "tenant_id": "acme", "bot": "b"}),
    ("trigger_subscriptions", {"sub_id": "s\n", "tenant_id": "acme", "bot": "b"}),
    ("trigger_subscriptions", {"sub_id": "s", "tenant_id": "acme", "bot": "b", "kind": "page",
                               "coalesce": {"quiet_seconds": 1, "max_wait_seconds": 2}}),
    ("trigger_subscriptions", {"sub_id": "s", "tenant_id": "acme", "bot": "b",
                               "max_per_second": 0.0005}),
    ("trigger_subscriptions", {"sub_id": "s", "tenant_id": "acme", "bot": "b",
                               "rule": {"labels_all": [f"l{i}" for i in range(101)]}}),
    ("trigger_subscriptions", {"sub_id": "s", "tenant_id": "acme", "bot": "b", "priority": 3.0}),
    ("trigger_subscriptions", {"sub_id": "s", "tenant_id": "acme", "bot": "b",
                               "coalesce": {"quiet_seconds": 0, "max_wait_seconds": 5}}),
]


# documents the service reads though the schema refuses them: a leniency of the reader that
# harms nothing, never a contract (the schema says what to write)
_TP = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
LENIENT: list[tuple[str, dict[str, Any]]] = [
    # OpenTelemetry's propagator reads a traceparent with spaces or tabs around it, or a trailing
    # newline (its ``$``), as the same ids; the rows store the service's own rendering of the
    # context, so nothing of the whitespace travels on
    *[("board_events", {"tenant_id": "acme", "seq": 3, "type": "card.created", "card_id": "c",
                        "trace": {"traceparent": tp}})
      for tp in (_TP + "\n", " " + _TP, _TP + "\t")],
]


def test_the_readers_leniencies_are_few_and_refused_by_the_schema() -> None:
    for collection, doc in LENIENT:
        stored = _stored(doc)
        assert READERS[collection](stored) == OK, doc
        assert schema_problem(collection, stored) is not None, doc


@pytest.mark.parametrize(("collection", "doc"), EXTRA,
                         ids=[f"{c}-{i}" for i, (c, _) in enumerate(EXTRA)])
def test_hand_made_bad_documents_are_judged_alike(collection: str, doc: dict[str, Any]) -> None:
    stored = _stored(doc)
    verdict = READERS[collection](stored)
    assert verdict.state != "ok", f"the service reads {doc!r}: not a bad document"
    assert disagreement(collection, stored, verdict) is None, (verdict, schema_problem(collection, stored))


# --- 3. the page's examples, and the command it shows -------------------------------------------


def page_examples() -> list[tuple[str, dict[str, Any]]]:
    """The page's ```json blocks, each after a line naming its collection (`schema: NAME`)."""
    text = PAGE.read_text()
    found = re.findall(r"<!-- schema: (\w+) -->\s*```json\n(.*?)```", text, re.S)
    return [(coll, json_util.loads(body)) for coll, body in found]


def test_every_example_on_the_page_validates_and_is_read() -> None:
    examples = page_examples()
    assert {c for c, _ in examples} == set(COLLECTIONS)
    for coll, doc in examples:
        assert schema_problem(coll, doc) is None, (coll, doc)
        assert READERS[coll](_stored(doc)) == OK, (coll, doc)


def test_check_jsonschema_agrees_with_the_python_validator(tmp_path: Path) -> None:
    """The page's command, on its examples and on the documents where an ECMAScript ``$`` and
    Python's differ (a trailing newline): the same verdict for each."""
    cases = [(c, as_json(d)) for c, d in page_examples()]
    cases += [(c, as_json(_stored(d))) for c, d in EXTRA + LENIENT if "\\n" in json_util.dumps(d)]
    for coll in COLLECTIONS:
        group = [d for c, d in cases if c == coll]
        files = []
        for i, doc in enumerate(group):
            f = tmp_path / f"{coll}-{i}.json"
            f.write_text(json.dumps(doc))
            files.append(f)
        schema = resources.files("board_outbox") / "schemas" / f"{coll}.schema.json"
        got = subprocess.run([sys.executable, "-m", "check_jsonschema", "--schemafile",
                              str(schema), "-o", "json", *map(str, files)],
                             capture_output=True, text=True, timeout=60)
        failed = {Path(e["filename"]).name for e in json.loads(got.stdout)["errors"]}
        for f, doc in zip(files, group, strict=True):
            assert (f.name not in failed) == VALIDATORS[coll].is_valid(doc), (coll, doc, got.stdout)
