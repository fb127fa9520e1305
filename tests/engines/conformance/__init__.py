"""The conformance suite: what every resumable engine does, through the real worker, on every database.

To put a new engine under it, write `harnesses/<engine>.py` (a class with `engine` and `agent(name,
turns)`, see `harnesses.Harness` and `harnesses/native.py`) and add it to `registry.HARNESSES`: one
line. Nothing else in the suite names an engine.
"""
