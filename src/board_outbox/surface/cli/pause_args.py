"""The arguments of ``pause``, ``resume`` and ``paused`` (F3): which tenant, subscription or bot,
who and why."""

from __future__ import annotations

import argparse

from board_outbox.surface.cli.argtypes import json_flag

__all__ = ["PAUSE_HELP", "add_pause", "add_paused"]

PAUSE_HELP: dict[str, tuple[str, str]] = {  # name -> (help, description)
    "pause": (
        "hold the effects of a tenant, a subscription or a bot until `resume`",
        "Pause one tenant, subscription or bot: every replica reads the pauses once\n"
        "per membership heartbeat (heartbeat_timeout_seconds / 6) and, from then on, holds the\n"
        "rows it pauses instead of running them: each waits (state pending, waiting \"paused:\n"
        "tenant T\") without spending an attempt, and runs in its order after `resume`. The tail\n"
        "keeps materializing (nothing is lost; the oldest pending row's age shows the hold). A\n"
        "tenant or subscription pause holds the launches and the other effect kinds of its\n"
        "subscriptions, never its projection rows (the board's read models stay current); a bot\n"
        "pause holds that bot's launches in every tenant. Rows already running finish. Pausing\n"
        "what is paused already replaces the reason. Recorded (who, when, why) in the pause's\n"
        "audit. An unknown tenant or subscription is exit 2 unless --force.",
    ),
    "resume": (
        "lift a pause: the held rows run again, in their order",
        "Lift the pause of one tenant, subscription or bot: within one heartbeat every replica\n"
        "stops holding its rows and gives the held ones back their own due time, so they run\n"
        "in the order they were due. Recorded in the pause's audit. Exit 1 when it is not\n"
        "paused.",
    ),
    "paused": (
        "list the pauses that are on",
        "The pauses that are on: scope, key, since when, by whom and why. --json prints one\n"
        "document: {\"schema\": 1, \"pauses\": [{scope, key, reason, by, at}],\n"
        "\"bad_documents\": [...]} (a pause document that does not parse pauses nothing; it is\n"
        "listed there, and `pause` writes it whole again).",
    ),
}


def add_pause(pz: argparse.ArgumentParser, name: str) -> None:
    which = pz.add_mutually_exclusive_group(required=True)
    which.add_argument("--tenant", metavar="T", help=f"{name} this tenant")
    which.add_argument("--subscription", metavar="S", help=f"{name} this subscription")
    which.add_argument("--bot", metavar="B", help=f"{name} this bot (in every tenant)")
    pz.add_argument("--by", default="", help=f"who {name}s (audit; default $USER)")
    if name == "pause":
        pz.add_argument("--reason", default="", metavar="TEXT",
                        help="why (shown by `paused`, the console and the audit)")
        pz.add_argument("--force", action="store_true",
                        help="pause a tenant or subscription the store does not know (yet)")
    json_flag(pz, f"what the {name} did, as one JSON document")


def add_paused(pl: argparse.ArgumentParser) -> None:
    pl.add_argument("--json", action="store_true", help="one JSON document (schema 1)")
