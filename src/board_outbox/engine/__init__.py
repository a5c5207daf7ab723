"""The engine layer: the mechanisms, written against the ports only, in six rooms.

    telemetry | flow -> tail | handlers -> work -> upkeep

A room imports only from rooms to its left, or from itself; rooms of one rank are peers and
never import each other (``tests/test_layers.py``). Each room's ``__init__`` says what it owns.
"""
