"""``board-outbox api-tokens create|list|revoke`` (A8): the JSON API's bearer tokens. A token's
text is printed once, at creation; the store keeps its hash."""

from __future__ import annotations

import argparse
import getpass
import sys

from board_outbox.surface.cli.commands import StoresFactory
from board_outbox.surface.cli.output import UsageError, print_json
from board_outbox.surface.format import when

__all__ = ["API_TOKENS_HELP", "add_api_tokens", "cmd_api_tokens"]

API_TOKENS_HELP = (
    "create, list or revoke the JSON API's bearer tokens",
    "The JSON API (/api/v1 on the operator port, beside the console) takes a bearer token:\n"
    "`Authorization: Bearer bo_ID_SECRET`. A read token may call the read endpoints and plan\n"
    "bulk actions; an admin token may also apply them and pause or resume. Tokens are apart\n"
    "from the console's admin token and session. create prints the token once (the store\n"
    "keeps a SHA-256 of its secret); list shows id, name, scope, who created it and when, and\n"
    "whether it is revoked; revoke ID ends it at once on every replica.",
)


def add_api_tokens(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    acts = parser.add_subparsers(dest="tok_command", metavar="ACTION", required=True)
    cr = acts.add_parser("create", parents=[common], help="create a token (printed once)",
                         description="Create a token; its text is printed once.")
    cr.add_argument("--name", required=True, help="what the token is for (listed)")
    cr.add_argument("--scope", choices=("read", "admin"), default="read",
                    help="read (default) or admin")
    cr.add_argument("--by", default="", help="who creates it (default $USER)")
    cr.add_argument("--json", action="store_true", help="the token and its record as JSON")
    ls = acts.add_parser("list", parents=[common], help="list tokens (never their secrets)",
                         description="List tokens, oldest first.")
    ls.add_argument("--json", action="store_true", help="one JSON document")
    rv = acts.add_parser("revoke", parents=[common], help="revoke a token by its id",
                         description="Revoke a token: refused from now on, on every replica.")
    rv.add_argument("token_id", metavar="ID")
    rv.add_argument("--by", default="", help="who revokes it (default $USER)")
    rv.add_argument("--json", action="store_true", help="the outcome as JSON")


async def cmd_api_tokens(args: argparse.Namespace, factory: StoresFactory) -> int:
    from board_outbox.engine.upkeep.api_tokens import create_token
    from board_outbox.model.clock import SystemClock
    from board_outbox.service.config import load_config

    cfg = load_config(args.config)
    async with factory(cfg) as stores:
        store = stores.api_tokens
        if store is None:
            raise UsageError("api-tokens: this backend keeps no API tokens")
        by = getattr(args, "by", "") or getpass.getuser()
        if args.tok_command == "create":
            text, token = await create_token(store, name=args.name, scope=args.scope, by=by,
                                             clock=SystemClock())
            if args.json:
                print_json({"schema": 1, "token": text, "record": token})
            else:
                print(f"token {token.token_id} ({token.scope}) for {token.name}:\n{text}\n"
                      "Shown once: store it now (the store keeps only its hash).")
            return 0
        if args.tok_command == "list":
            tokens = await store.all()
            if args.json:
                print_json({"schema": 1, "tokens": [
                    {k: v for k, v in _fields(t).items() if k != "digest"} for t in tokens]})
                return 0
            if not tokens:
                print("no API tokens")
            for t in tokens:
                state = f"revoked {when(t.revoked_at)} by {t.revoked_by}" if t.revoked_at \
                    else "active"
                print(f"{t.token_id}  {t.scope:5}  {t.name}  created {when(t.created_at)} by "
                      f"{t.created_by}  {state}")
            return 0
        ok = await store.revoke(args.token_id, SystemClock().now(), by)
        if args.json:
            print_json({"schema": 1, "token_id": args.token_id, "revoked": ok})
        elif ok:
            print(f"token {args.token_id} revoked")
        else:
            print(f"board-outbox: no active token {args.token_id!r}", file=sys.stderr)
        return 0 if ok else 1


def _fields(t: object) -> dict[str, object]:
    import msgspec

    out = msgspec.to_builtins(t)
    assert isinstance(out, dict)
    return out
