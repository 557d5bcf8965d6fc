"""llama.cpp as an engine of the simulator (engine.py defines it): its placement (--fit), GPU memory, graph
and export."""
