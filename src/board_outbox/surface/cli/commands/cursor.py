"""``board-outbox cursor show|reset`` (R2): look at one tenant's cursor against its counter,
and set it where an operator decides -- the remedy for a cursor ahead of its counter (restored
from a backup, hand-edited), which the running replicas hold instead of draining past events.

Resetting to N re-reads the tenant's events after N: events whose rows already exist cost
nothing (rows are keyed by event and inserted only once), so a reset a little too low is
safe; one beyond the counter is refused (it would skip events), and so is a tenant the store
does not know at all (no cursor, counter, subscription or live row: a typo)."""

from __future__ import annotations

import argparse

from board_outbox.model.errors import StoreError
from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError, print_json


async def cmd_cursor(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.model.validation import tenant_problem
    from board_outbox.service.config import load_config
    from board_outbox.service.health import all_tenants

    problem = tenant_problem(args.tenant)
    if problem is not None:
        raise UsageError(f"cursor: {problem}")
    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        counter = await stores.events.allocated_seq(args.tenant)
        try:
            current: int | None = await stores.cursors.get(args.tenant)
            current_text = "none" if current is None else str(current)
        except StoreError as exc:  # a malformed cursor document: reset overwrites it
            current, current_text = None, f"malformed ({exc})"
        if args.cursor_command == "show":
            held = (await stores.cursors.holds()).get(args.tenant)
            note = ""
            if held is not None:
                note = (f" -- HELD: found ahead of the counter (cursor {held[0]}, counter "
                        f"{held[1]}); run `cursor reset`")
            elif current is not None and current > counter:
                note = " -- AHEAD of the counter: run `cursor reset`"
            if args.json:
                print_json({"schema": 1, "tenant_id": args.tenant, "cursor": current,
                            "cursor_problem": None if current is not None or
                            current_text == "none" else current_text,
                            "counter": counter, "held": list(held) if held else None,
                            "ahead": current is not None and current > counter})
            else:
                print(f"tenant {args.tenant}: cursor {current_text}, counter {counter}{note}")
            return 0
        to = args.to
        if current is None and current_text == "none" and args.tenant not in await all_tenants(stores):
            # no cursor, counter, subscription or live row: a typo, not a tenant to start
            raise UsageError(f"cursor reset: unknown tenant {args.tenant!r}: no counter, no "
                             "events, no subscriptions, no cursor (`board-outbox status` lists "
                             "the tenants)")
        if to > counter:
            raise UsageError(f"cursor reset: --to {to} is beyond tenant {args.tenant!r}'s counter "
                             f"({counter}): events {counter + 1}..{to} would be skipped")
        if current is None:
            await stores.cursors.put(args.tenant, to)
        elif not await stores.cursors.compare_and_set(args.tenant, current, to):
            print(f"board-outbox: tenant {args.tenant}: the cursor moved meanwhile; run again")
            return 1
    if args.json:
        print_json({"schema": 1, "tenant_id": args.tenant, "before": current, "after": to,
                    "counter": counter})
    else:
        print(f"tenant {args.tenant}: cursor {current_text} -> {to} (counter {counter}); the "
              f"replicas drain events {to + 1}..{counter} on their next poll")
    return 0
