"""``board-outbox subscriptions add|list|show|edit|disable|enable|rm`` (P6): the subscriptions
managed from the command line through ``surface/subscribing`` (the console's own module too):
validated as the service reads them, conditional on the revision read, audited."""

from __future__ import annotations

import argparse
import getpass
import sys
import time
from pathlib import Path
from typing import Any

import msgspec

from board_outbox.model.codec import to_doc
from board_outbox.model.rows import AuditEntry
from board_outbox.model.subscription_records import SubscriptionRecord
from board_outbox.model.subscriptions import Subscription
from board_outbox.model.times import when
from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError, print_json

SCHEMA = 1  # the --json documents: fields are only ever added

# the flags that describe a subscription (``--file`` replaces them all)
_DESCRIBING = ("tenant", "bot", "kind", "event_types", "column", "labels_all", "consume_labels",
               "priority", "coalesce", "max_in_flight", "max_per_second", "disabled")


class SubscriptionView(msgspec.Struct, kw_only=True):
    """One stored subscription as ``show --json`` and ``list --json`` print it."""

    sub_id: str
    tenant_id: str | None
    subscription: Subscription | None  # None: the stored document does not decode
    problem: str | None = None
    rev: int = 0
    audit: list[AuditEntry] = msgspec.field(default_factory=list)


class SubscriptionShown(SubscriptionView, kw_only=True):
    """``show --json``."""

    schema: int = SCHEMA


class SubscriptionList(msgspec.Struct, kw_only=True):
    schema: int
    subscriptions: list[SubscriptionView]
    # stored documents that do not decode (also in ``subscriptions``, with their problem)
    bad_documents: list[SubscriptionView]


class Written(msgspec.Struct, kw_only=True):
    """What a write did (``--json`` of add, edit, disable, enable, rm)."""

    schema: int
    action: str
    sub_id: str
    changed: bool
    detail: str
    subscription: Subscription | None  # as it is now (rm: as it was)


def _view(rec: SubscriptionRecord, *, audit: bool = True) -> SubscriptionView:
    return SubscriptionView(sub_id=rec.sub_id, tenant_id=rec.tenant_id, subscription=rec.sub,
                            problem=rec.problem, rev=rec.rev, audit=rec.audit if audit else [])


def _read_file(path: str) -> dict[str, Any]:
    """The subscription in a JSON file (``-``: standard input): its fields, or what ``show
    --json`` printed."""
    try:
        raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"subscriptions add --file {path}: {exc.strerror or exc}") from None
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise UsageError(f"subscriptions add --file {path}: not JSON: {exc}") from None
    if isinstance(doc, dict) and isinstance(doc.get("subscription"), dict):
        doc = doc["subscription"]  # `show --json`'s document (no subscription has that field)
    if not isinstance(doc, dict):
        raise UsageError(f"subscriptions add --file {path}: expected a JSON object")
    return doc


def _add_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields: dict[str, Any]
    if args.file is not None:
        given = [n for n in _DESCRIBING if getattr(args, n) not in (None, False)]
        if given:
            raise UsageError(f"subscriptions add: --file or the flags ({', '.join(given)}), "
                             "not both")
        fields = _read_file(args.file)
        if args.sub_id is not None and fields.setdefault("sub_id", args.sub_id) != args.sub_id:
            raise UsageError(f"subscriptions add: SUB_ID {args.sub_id!r} differs from the "
                             f"file's sub_id {fields['sub_id']!r}")
        return fields
    missing = [f for f, v in (("SUB_ID", args.sub_id), ("--tenant", args.tenant),
                              ("--bot", args.bot)) if v is None]
    if missing:
        raise UsageError(f"subscriptions add: give {', '.join(missing)} (or --file)")
    fields = {"sub_id": args.sub_id, "tenant_id": args.tenant, "bot": args.bot,
                              "enabled": not args.disabled}
    rule = {k: v for k, v in (("event_types", args.event_types), ("column", args.column),
                              ("labels_all", args.labels_all)) if v is not None}
    if rule:
        fields["rule"] = rule
    for name in ("kind", "consume_labels", "priority", "coalesce", "max_in_flight",
                 "max_per_second"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return fields


def _edit_changes(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    pairs: tuple[tuple[str, Any, str, Any], ...] = (
        ("rule.event_types", args.event_types, "any_event_type", []),
        ("rule.column", args.column, "any_column", None),
        ("rule.labels_all", args.labels_all, "no_labels", []),
        ("consume_labels", args.consume_labels, "no_consume_labels", []),
        ("coalesce", args.coalesce, "no_coalesce", None))
    for key, value, clear, cleared in pairs:
        if value is not None and getattr(args, clear):
            raise UsageError(f"subscriptions edit: --{clear.replace('_', '-')} clears what the "
                             "other flag sets: give one")
        if value is not None:
            changes[key] = value
        elif getattr(args, clear):
            changes[key] = cleared
    for name in ("bot", "kind", "priority", "max_in_flight", "max_per_second"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.default_limits:
        if args.max_in_flight is not None or args.max_per_second is not None:
            raise UsageError("subscriptions edit: --default-limits drops the limits "
                             "--max-in-flight/--max-per-second set: give one")
        changes["max_in_flight"] = changes["max_per_second"] = None
    if not changes:
        raise UsageError("subscriptions edit: nothing to change (`subscriptions edit --help` "
                         "lists the fields)")
    return changes


async def cmd_subscriptions(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.service.config import load_config
    from board_outbox.service.plugins import resolve_handlers
    from board_outbox.surface import subscribing as s

    act = args.subs_command
    by = (getattr(args, "by", "") or getpass.getuser()) if act not in ("list", "show") else ""
    fields = _add_fields(args) if act == "add" else None
    changes = _edit_changes(args) if act == "edit" else None
    cfg = load_config(args.config)
    kinds = None if getattr(args, "force", False) else s.known(resolve_handlers(cfg.handlers))
    new = s.build(fields, kinds=kinds) if fields is not None else None  # before the store
    async with factory(cfg) as stores:
        now = time.time()
        if act == "list":
            return _print_list(args, await s.listing(stores, args.tenant))
        if act == "show":
            return _print_show(args, await s.record(stores, args.sub_id))
        if new is not None:
            await s.add(stores, new, by=by, now=now)
            return _written(args, "add", new, True, f"added (tenant {new.tenant_id}): "
                            f"{s.summary(new)}; the replicas match it from their next batch")
        if changes is not None:
            rec = await s.record(stores, args.sub_id)
            current = s.decoded(rec)
            after = s.build(s.merge(current, changes), kinds=kinds)
            detail = s.changes_between(current, after)
            await s.replace(stores, rec, after, by=by, now=now)
            return _written(args, "edit", after, True, f"changed: {detail}")
        if act in ("enable", "disable"):
            changed = await s.set_enabled(stores, args.sub_id, act == "enable", by=by, now=now)
            rec = await s.record(stores, args.sub_id)
            verb = f"{act}d"
            return _written(args, act, rec.sub, changed,
                            verb if changed else f"was {verb} already: nothing written")
        if not args.yes and not _confirm_rm(args.sub_id):
            print("nothing removed")
            return 1
        gone = await s.remove(stores, args.sub_id, by=by, now=now)
    doc = msgspec.json.encode(to_doc(gone.sub) if gone.sub else {"problem": gone.problem})
    return _written(args, "rm", gone.sub, True,
                    f"removed; its document was {doc.decode()} (`subscriptions add --file` "
                    "restores it)")


def _confirm_rm(sub_id: str) -> bool:
    if not sys.stdin.isatty():
        raise UsageError(f"subscriptions rm {sub_id}: confirm with --yes (standard input is not "
                         "a terminal to ask on)")
    return input(f"Remove subscription {sub_id}? [y/N] ").strip().lower() in ("y", "yes")


def _written(args: argparse.Namespace, action: str, sub: Subscription | None, changed: bool,
             detail: str) -> int:
    sub_id = sub.sub_id if sub is not None else args.sub_id
    if args.json:
        print_json(Written(schema=SCHEMA, action=action, sub_id=sub_id, changed=changed,
                           detail=detail, subscription=sub))
    else:
        print(f"subscription {sub_id} {detail}")
    return 0


def _print_list(args: argparse.Namespace, recs: list[SubscriptionRecord]) -> int:
    from board_outbox.surface.subscribing import summary

    views = [_view(r, audit=False) for r in recs]
    if args.json:
        print_json(SubscriptionList(schema=SCHEMA, subscriptions=views,
                                    bad_documents=[v for v in views if v.subscription is None]))
        return 0
    if not recs:
        print("no subscriptions" + (f" for tenant {args.tenant}" if args.tenant else ""))
        return 0
    print(f"{'SUB_ID':28} {'TENANT':16} WHAT")
    for r in recs:
        what = summary(r.sub) if r.sub is not None else \
            f"DOES NOT DECODE: {r.problem} (the service ignores it)"
        print(f"{r.sub_id[:28]:28} {(r.tenant_id or '?')[:16]:16} {what}")
    bad = sum(1 for r in recs if r.sub is None)
    print(f"{len(recs)} subscription{'s' if len(recs) != 1 else ''}"
          + (f", {bad} stored document{'s' if bad != 1 else ''} the service cannot read "
             "(`subscriptions rm ID` removes one)" if bad else ""))
    return 0


def _print_show(args: argparse.Namespace, rec: SubscriptionRecord) -> int:
    from board_outbox.surface.subscribing import summary

    if args.json:
        print_json(SubscriptionShown(**msgspec.structs.asdict(_view(rec))))
        return 0
    print(f"subscription {rec.sub_id} (tenant {rec.tenant_id or '?'}, revision {rec.rev})")
    if rec.sub is None:
        print(f"  does not decode: {rec.problem}\n  the service ignores it: `board-outbox "
              f"subscriptions rm {rec.sub_id}` removes it")
    else:
        print(f"  {summary(rec.sub)}")
        for key, value in to_doc(rec.sub).items():
            print(f"  {key:16} {msgspec.json.encode(value).decode()}")
    print("audit:" if rec.audit else "audit: none (no command wrote it)")
    for e in rec.audit:
        print(f"  {when(e.at)}  {e.action:8} by {e.by}: {e.detail}")
    return 0
