"""The package's version: its one source. The build reads it (``[tool.hatch.version]`` in
pyproject.toml), the package re-exports it (``board_outbox.__version__``), and ``board-outbox
--version`` prints the installed distribution's, which the build took from here."""

__version__ = "0.1.0"
