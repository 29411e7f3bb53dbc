"""Reading finished runs: a saved posterior (`posterior`), ``bdl-eval`` (`evaluate`),
``bdl-report`` and its sweeps, tables, paper figures and plots, and pruning curves. Never imports
the runner: a run directory is read as data."""
