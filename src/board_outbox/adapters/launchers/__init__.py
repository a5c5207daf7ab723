"""Launcher adapters (the ``Launcher`` port): where a ``launch`` row's bot start goes.

- ``log``: write one structured log line per launch (dry runs, staging);
- ``http``: POST the launch request as JSON to a bot-runner endpoint.
"""

from __future__ import annotations

from board_outbox.adapters.launchers.http import HttpLauncher
from board_outbox.adapters.launchers.log import LogLauncher

__all__ = ["HttpLauncher", "LogLauncher"]
