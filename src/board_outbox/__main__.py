import sys

from board_outbox.surface.cli import main

sys.exit(main())
