"""The built-in projections of board-outbox, shipped as a plugin package that uses only the public
SDK (``board_outbox.sdk``), exactly as a user's projection package would. They register through
the ``board_outbox.projections`` entry points in board-outbox's own ``pyproject.toml``:

- ``board-reflect``: per card, the card as of the newest event applied (``BoardReflect``);
- ``card-activity``: per card, the last events with who and when (``CardActivity``).

Nothing under ``src/`` imports this package; the service finds it by entry point.
"""

from __future__ import annotations

from board_outbox_projections.board_reflect import BoardReflect
from board_outbox_projections.card_activity import CardActivity

__all__ = ["BoardReflect", "CardActivity"]
