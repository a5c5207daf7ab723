"""``board-outbox doctor [--json]`` (O7): one line per check, each with what to do; exit 0 when
none fails, 1 otherwise (``surface/doctor``)."""

from __future__ import annotations

import argparse

import msgspec

from board_outbox.model.diagnosis import Check
from board_outbox.model.errors import StoreError, StoreUnavailable
from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import print_json

SCHEMA = 1  # ``doctor --json``: fields are only ever added

MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


class DoctorReport(msgspec.Struct, kw_only=True):
    schema: int
    ok: bool  # no check failed
    checks: list[Check]


async def cmd_doctor(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.service.config import load_config, require_backend
    from board_outbox.surface.doctor import diagnose

    cfg = load_config(args.config)
    if require_backend(cfg) == "memory":
        checks = await diagnose(cfg, None)
    else:
        from board_outbox.adapters.mongo.client import reach, seed_hosts
        from board_outbox.adapters.mongo.diagnostics import MongoProbe
        from board_outbox.service.backends import mongo_client

        client = mongo_client(cfg.store)
        try:
            try:
                await reach(client, cfg.store.server_selection_timeout_seconds,
                            seed_hosts(cfg.store.uri))
            except (StoreUnavailable, StoreError) as exc:
                checks = await diagnose(cfg, None, reach_error=str(exc))
            else:
                checks = await diagnose(cfg, MongoProbe(client, cfg.store.database))
        finally:
            await client.close()
    ok = not any(c.status == "fail" for c in checks)
    if args.json:
        print_json(DoctorReport(schema=SCHEMA, ok=ok, checks=checks))
    else:
        for c in checks:
            print(f"{MARK[c.status]:4}  {c.name:15} {c.found}" + (f" -> {c.todo}" if c.todo else ""))
        fails = sum(1 for c in checks if c.status == "fail")
        warns = sum(1 for c in checks if c.status == "warn")
        print(f"{len(checks)} checks: {fails} failed, {warns} to look at"
              if fails or warns else f"{len(checks)} checks passed")
    return 0 if ok else 1
