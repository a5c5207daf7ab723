"""A plugin module whose import fails (a config naming it is a one-line error, exit 2)."""

raise RuntimeError("this plugin cannot be imported")
