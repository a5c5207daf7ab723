"""Gone: its blocks moved to modules named for what they hold (``ids``, ``board``,
``subscriptions``, ``row_keys``, ``rows``, ``codec``). These re-exports keep the import sites
running until they are rewritten in the next commit, which deletes this file."""

# model-split: temporary re-exports
from board_outbox.model.board import *  # noqa: F403
from board_outbox.model.codec import *  # noqa: F403
from board_outbox.model.codec import _UNREADABLE as _UNREADABLE
from board_outbox.model.ids import *  # noqa: F403
from board_outbox.model.ids import _ID as _ID
from board_outbox.model.row_keys import *  # noqa: F403
from board_outbox.model.rows import *  # noqa: F403
from board_outbox.model.subscriptions import *  # noqa: F403
