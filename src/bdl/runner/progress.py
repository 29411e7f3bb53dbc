"""What a run shows while it runs: a progress bar on a terminal, a line every ``log_every``
epochs otherwise."""

from __future__ import annotations

import contextlib
import logging
import shutil
import sys
from typing import Any

from bdl.runner.experiment import Experiment

log = logging.getLogger("bdl")

#: Terminal columns below which a bar could not show its numbers: plain lines instead.
MIN_COLUMNS = 40


class Progress:
    """A progress bar on a terminal; plain lines every ``log_every`` epochs otherwise (logs, CI).
    Not ``shown`` on the ranks of a run under ``torchrun`` but rank 0."""

    def __init__(self, experiment: Experiment, epoch: int, shown: bool = True) -> None:
        self.experiment = experiment
        self.shown = shown
        self.bar = None
        self._redirect = contextlib.ExitStack()
        if shown and sys.stderr.isatty() and shutil.get_terminal_size().columns >= MIN_COLUMNS:
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm

            self.bar = tqdm(
                total=experiment.run.epochs, initial=epoch, unit="epoch", dynamic_ncols=True
            )
            # log lines go above the bar instead of into it
            self._redirect.enter_context(logging_redirect_tqdm())

    def update(self, row: dict[str, Any]) -> None:
        exp, epoch = self.experiment, row["epoch"]
        potential = row["potential"]
        parts = {"U/N": "inf" if potential is None else f"{potential / exp.run.data.num_train:.4g}"}
        if row["num_samples"]:
            parts[exp.run.task.headline] = f"{row['test_metric']:.4f}"
        else:
            parts["phase"] = "burn-in" if exp.sampler.declaration.injects_noise else "optimising"
        if row["accept_rate"] != "":
            parts["accept"] = f"{row['accept_rate']:.2f}"
        if self.bar is not None:
            self.bar.set_postfix(parts, refresh=False)
            self.bar.update(1)
        elif self.shown and (epoch % exp.run.log_every == 0 or epoch == exp.run.epochs):
            log.info(
                "epoch %d/%d  %s  samples %d",
                epoch,
                exp.run.epochs,
                "  ".join(f"{k} {v}" for k, v in parts.items()),
                row["num_samples"],
            )

    def extend(self, epochs: int) -> None:
        """The bar's end moved to ``epochs`` (a run until converged sampling on)."""
        if self.bar is not None:
            self.bar.total = epochs
            self.bar.refresh()

    def close(self) -> None:
        self._redirect.close()
        if self.bar is not None:
            self.bar.close()


def say(level: int, text: str) -> None:
    """Log ``text`` at ``level``, shown bare on a terminal: a handler writing to the standard
    streams writes the line alone (the verdict's lines fit 100 columns, the logger's prefix
    would not), every other handler (the run's log file, a test's capture) gets the record as
    it formats it. Without handlers of its own, logging's usual fallback."""
    if not log.isEnabledFor(level):
        return
    record = log.makeRecord(log.name, level, __file__, 0, text, None, None)
    handlers = [h for logger in _chain(log) for h in logger.handlers]
    if not handlers:
        log.handle(record)
        return
    for handler in handlers:
        stream = getattr(handler, "stream", None)
        if stream in (sys.stderr, sys.stdout) and not isinstance(handler, logging.FileHandler):
            if record.levelno >= handler.level:
                stream.write(text + "\n")
                stream.flush()
        elif record.levelno >= handler.level:
            handler.handle(record)


def _chain(logger: logging.Logger):
    """``logger`` and the ancestors its records propagate to."""
    while logger is not None:
        yield logger
        logger = logger.parent if logger.propagate else None
