"""Stopping a run so that it can be finished: the signals a run stops on, and the command that
resumes it.

A cluster's preemption (SIGTERM, or submitit's SIGUSR2) or Ctrl-C (SIGINT) is caught, and the
runner stops where it can checkpoint (`Signals`); the run then ends with
`Interrupted`, whose message gives the command that resumes it (`resume_command`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from bdl.runner import distributed


class Interrupted(Exception):
    """SIGTERM or SIGINT: the run was checkpointed (if it had begun) and stopped; ``exit_code``
    is 128 + the signal's number, as a shell reports a process the signal ended."""

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(message)
        self.exit_code = 128 + signum


class Signals:
    """Catches SIGTERM (a cluster's preemption) and SIGINT (Ctrl-C) for the ``with`` block, so
    that the run stops where it can checkpoint; a second signal stops it at once.

    Under submitit (``hydra/launcher=slurm``), SIGUSR2 announces the time limit or a preemption
    and submitit's handler requeues the job and exits: it is caught too, and handed on to
    submitit once the run has stopped and checkpointed."""

    caught: int | None = None

    def __enter__(self) -> Signals:
        signals = [signal.SIGTERM, signal.SIGINT]
        if callable(signal.getsignal(signal.SIGUSR2)):
            signals.append(signal.SIGUSR2)
        self.previous = {s: signal.signal(s, self._on) for s in signals}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        if self.caught == signal.SIGUSR2:
            self.previous[signal.SIGUSR2](signal.SIGUSR2, None)

    def _on(self, signum: int, frame: Any) -> None:
        if self.caught is not None:
            raise KeyboardInterrupt
        self.caught = signum

    def check(self) -> None:
        """Raise `Interrupted` for a signal caught before sampling began."""
        if self.caught is not None:
            name = signal.Signals(self.caught).name
            raise Interrupted(self.caught, f"{name} before sampling began; nothing to resume")


def resume_command(directory: Path, overrides: list[str] | None = None) -> str:
    """The command line that continues the run in ``directory`` with ``overrides`` (by default
    the run's, as Hydra recorded them), under ``torchrun`` as it ran: the same number of ranks
    per node, and on several nodes ``torchrun``'s own options. It runs as printed: each word is
    quoted for the shell, and the directory (a sweep job's holds ``=`` and ``,``) for Hydra's
    override grammar too."""
    from hydra.core.hydra_config import HydraConfig

    if overrides is None:
        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    overrides = [o for o in overrides if not o.startswith("resume=")]
    run_dir = f"hydra.run.dir={hydra_value(str(directory))}"
    command = [_program(), *overrides, run_dir, "resume=true"]
    size = distributed.world_size()
    if size > 1:
        per_node = int(os.environ.get("LOCAL_WORLD_SIZE", size))
        # on several nodes, the rendezvous options are the cluster's: "..." stands for them
        nodes = ["--standalone"] if per_node == size else [f"--nnodes={size // per_node}", "..."]
        command = ["torchrun", *nodes, f"--nproc_per_node={per_node}", "--no-python", *command]
    return " ".join(word if word == "..." else shlex.quote(word) for word in command)


def hydra_value(text: str) -> str:
    """``text`` as a value of Hydra's override grammar that reads back as ``text``: a path of
    plain characters as it is, anything else single-quoted, with a quote, the backslashes
    before one or at the end, and an interpolation's ``${`` escaped (a directory named
    ``${oc.env:HOME}`` is a name, not a lookup)."""
    if re.fullmatch(r"[\w.-]*/[\w./-]*", text, flags=re.ASCII):
        return text
    escaped = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", escaped)
    escaped = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped)
    return f"'{escaped}'"


def _program() -> str:
    """``bdl-run`` as the shell finds it; the path it was started by where the shell would not
    find that one (a virtual environment not activated), so that the command runs as printed."""
    started, found = Path(sys.argv[0]), shutil.which("bdl-run")
    if started.name != "bdl-run" or (found and Path(found).resolve() == started.resolve()):
        return "bdl-run"
    return str(started.resolve())
