"""The leaf types the ports speak that no model module defines: what a label's
consumption comes to and one read-model write. They import only the model, so every
port module may import them."""

from __future__ import annotations

from typing import Literal

from board_outbox.model.records import PushRecent, UpsertIfNewer

__all__ = ["ConsumeOutcome", "ReadModelOp"]


ConsumeOutcome = Literal["consumed", "already", "absent"]


ReadModelOp = UpsertIfNewer | PushRecent
