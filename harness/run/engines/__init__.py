"""The engine processes of a run: the plan of which engines are resident together
(`plan`), the bank that starts, keeps and rebuilds them (`bank`), the worker process each
side's engine runs in (`worker`), the preloading processes engines are forked from
(`preload`, `preloading`), and what an engine start did (`start_phases`, `compile_cache`).
"""
