"""``board-outbox pause | resume | paused`` (F3): hold the effects of a tenant, a
subscription or a bot, lift the hold, and list the holds. Every replica honours a pause within
one heartbeat (``membership.heartbeat_timeout_seconds / 6``); the rows it holds wait without
spending an attempt and run in their order once it is lifted."""

from __future__ import annotations

import argparse
import sys
import time

import msgspec

from board_outbox.model.times import when
from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError, print_json

SCHEMA = 1  # ``paused --json``: fields are only ever added


class PauseView(msgspec.Struct, kw_only=True):
    scope: str
    key: str
    reason: str
    by: str
    at: float  # the last pause of it (a new reason)
    since: float  # when it went on


class PausedReport(msgspec.Struct, kw_only=True):
    schema: int
    pauses: list[PauseView]
    bad_documents: list[object]


def scope_of(args: argparse.Namespace) -> tuple[str, str]:
    """The one scope the command line names (the parser makes them exclusive and required)."""
    for scope, key in (("tenant", args.tenant), ("subscription", args.subscription),
                       ("bot", args.bot)):
        if key is not None:
            return scope, key
    raise UsageError(f"{args.command}: give --tenant, --subscription or --bot")


async def cmd_pause(args: argparse.Namespace, factory: StoresFactory) -> int:
    import getpass

    from board_outbox.service.config import load_config
    from board_outbox.surface.pausing import check_pause, pause, unknown

    scope, key = scope_of(args)
    by = args.by or getpass.getuser()
    check_pause(scope, key, reason=args.reason, by=by)  # before the store: exit 2, nothing read
    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        if not args.force and (why := await unknown(stores, scope, key)) is not None:
            raise UsageError(f"pause: {why}; --force pauses it anyway")
        new = await pause(stores, scope, key, reason=args.reason, by=by, now=time.time())
    every = cfg.membership.interval_seconds
    if args.json:
        print_json({"schema": SCHEMA, "action": "pause", "scope": scope, "key": key,
                    "reason": args.reason, "by": by, "new": new})
    elif new:
        print(f"paused {scope} {key} (by {by}{': ' + args.reason if args.reason else ''}): every "
              f"replica holds its rows within one heartbeat ({every:.3g} s); resume with "
              f"`board-outbox resume --{scope} {key}`")
    else:
        print(f"{scope} {key} was paused already; its reason is now: "
              f"{args.reason or '(none given)'} (by {by})")
    return 0


async def cmd_resume(args: argparse.Namespace, factory: StoresFactory) -> int:
    import getpass

    from board_outbox.service.config import load_config
    from board_outbox.surface.pausing import check_pause, resume

    scope, key = scope_of(args)
    by = args.by or getpass.getuser()
    check_pause(scope, key, by=by)
    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        lifted = await resume(stores, scope, key, by=by, now=time.time())
    if args.json:
        print_json({"schema": SCHEMA, "action": "resume", "scope": scope, "key": key, "by": by,
                    "lifted": lifted})
        return 0 if lifted else 1
    if not lifted:
        print(f"board-outbox: {scope} {key} is not paused (`board-outbox paused` lists the "
              "pauses)", file=sys.stderr)
        return 1
    print(f"resumed {scope} {key} (by {by}): every replica runs its held rows within one "
          f"heartbeat ({cfg.membership.interval_seconds:.3g} s), in their order")
    return 0


async def cmd_paused(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.model.bad_documents import BAD_DOCUMENTS
    from board_outbox.model.pause import PAUSES_COLLECTION
    from board_outbox.service.config import load_config
    from board_outbox.surface.pausing import pauses_on

    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        on = await pauses_on(stores)
    bad = [d for d in BAD_DOCUMENTS.current() if d.collection == PAUSES_COLLECTION]
    if args.json:
        report = PausedReport(schema=SCHEMA, bad_documents=list(bad), pauses=[
            PauseView(scope=p.scope, key=p.key, reason=p.reason, by=p.by, at=p.at,
                      since=p.since) for p in on])
        print(msgspec.json.format(msgspec.json.encode(report), indent=2).decode())
        return 0
    if not on:
        print("nothing is paused")
    else:
        print(f"{'SCOPE':13} {'KEY':30} {'SINCE':24} {'BY':16} REASON")
        for p in on:
            print(f"{p.scope:13} {p.key:30} {when(p.since):24} {p.by[:16]:16} {p.reason}")
        print(f"{len(on)} pause{'s' if len(on) != 1 else ''} on")
    for doc in bad:
        print(f"malformed pause document {doc.key}: {doc.problem} (it pauses nothing; "
              "`pause` writes it whole again)", file=sys.stderr)
    return 0
