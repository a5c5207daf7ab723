"""The ``http`` launcher: POST the launch request as JSON to a bot-runner endpoint.

2xx is a launch (the body's ``launch_id`` if any); 5xx, 408, 429 and network errors retry
(``LaunchFailed``); any other 4xx can never succeed and dead-letters at once
(``PermanentEffectError``).
"""

from __future__ import annotations

import urllib.error
import urllib.request

import anyio.to_thread
import msgspec

from ..errors import LaunchFailed, PermanentEffectError
from ..ports import LaunchRequest


class HttpLauncher:
    def __init__(self, url: str, timeout_seconds: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout_seconds

    async def launch(self, req: LaunchRequest) -> str:
        body = msgspec.json.encode(req)
        return await anyio.to_thread.run_sync(self._post, body, req.row_key)

    def _post(self, body: bytes, row_key: str) -> str:
        request = urllib.request.Request(
            self.url, data=body, method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": row_key},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as resp:
                payload = resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 or exc.code in (408, 429):
                raise LaunchFailed(f"bot runner answered {exc.code} {exc.reason}") from None
            raise PermanentEffectError(f"bot runner refused: {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise LaunchFailed(f"bot runner unreachable: {exc}") from None
        try:
            doc = msgspec.json.decode(payload) if payload else {}
        except msgspec.DecodeError:
            doc = {}
        launch_id = doc.get("launch_id") if isinstance(doc, dict) else None
        return str(launch_id or "accepted")
