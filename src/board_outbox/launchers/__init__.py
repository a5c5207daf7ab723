"""Launcher adapters (the ``Launcher`` port): where a ``launch`` row's bot start goes.

- ``log``: write one structured log line per launch (dry runs, staging);
- ``http``: POST the launch request as JSON to a bot-runner endpoint.
"""

from __future__ import annotations

from .http import HttpLauncher
from .log import LogLauncher

__all__ = ["HttpLauncher", "LogLauncher"]
