"""What a run leaves on disk: posterior samples and predictives (`store`) and the run directory
with the names of its files (`outputs`). Imports the library and `bdl.composition` only, so that
every reader of a run directory can use it without the runner."""
