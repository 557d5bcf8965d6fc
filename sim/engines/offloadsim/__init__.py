"""offloadsim as an engine of the simulator (engine.py defines it)."""
