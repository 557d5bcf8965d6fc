"""Predicted against measured, from recorded runs: each recorded run's plan and workload rebuilt, priced again with
today's simulator on the machine profile calibrated in the run's own call, and the error statistics of each workload
family. Readers of JSON only: no torch. `benchmarks/accuracy.py` writes docs/accuracy.md from them.

Modules: errors (error statistics and the repeat floor), records (a re-predicted run and reading a recorded file),
matrix (offloadsim's own engine), peers (every access to the peer engines' cost model), hf_peers (Accelerate and
AirLLM), llamacpp_runs (llama.cpp's llama-bench and llama-batched-bench records as runs), llamacpp (its costs
fitted, the held-out runs re-predicted), families (runs grouped into the page's tables), page (the markdown).
"""
