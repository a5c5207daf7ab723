"""The ``log`` launcher: one structured log line per launch (dry runs, staging)."""

from __future__ import annotations

import logging
import uuid

from board_outbox.ports import LaunchRequest

log = logging.getLogger("board_outbox.launcher")


class LogLauncher:
    async def launch(self, req: LaunchRequest) -> str:
        launch_id = uuid.uuid4().hex[:12]
        log.info("launch %s for %s", req.bot, req.row_key,
                 extra={"tenant_id": req.tenant_id, "seq": req.seq, "row_key": req.row_key,
                        "launch_id": launch_id})
        return launch_id
