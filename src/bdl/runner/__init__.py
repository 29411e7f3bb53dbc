"""``bdl-run``'s work: a run's story (`run`), what it builds (`experiment`), the one epoch loop for
one chain or K stacked chains (`loop`, `steppers`, `sampling`), checkpoints and interruptions
(`checkpoint`, `interrupts`), its end (`results`), and the Python entry `run_model`
(`python_api`)."""
