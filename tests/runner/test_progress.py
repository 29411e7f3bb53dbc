"""What a run shows while it runs, off a terminal: a line every ``log_every`` epochs with the
potential per datum, the phase or the running model average's metric, and the samples."""

import json
import logging
import re
import sys

from bdl.runner.progress import say
from bdl.runner.run import run
from runner.test_resume import config, write_tiny_uci


def test_the_progress_lines_show_the_phase_then_the_metric(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="bdl")
    root = write_tiny_uci(tmp_path / "data")
    run(config(root, "log_every=2"), tmp_path / "run")  # 6 epochs, 2 of burn-in
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("epoch ")]
    assert [line.split()[1] for line in lines] == ["2/6", "4/6", "6/6"]
    assert "phase burn-in" in lines[0] and "samples 0" in lines[0]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    shown = re.search(r"test_rmse (\d+\.\d{4})  samples 4$", lines[-1])
    assert shown and float(shown.group(1)) == round(metrics["test_rmse"], 4)


def _experiment(epochs: int = 6, log_every: int = 2):
    from types import SimpleNamespace

    from bdl.samplers import SGLD

    run = SimpleNamespace(
        epochs=epochs,
        log_every=log_every,
        data=SimpleNamespace(num_train=10),
        task=SimpleNamespace(headline="test_rmse"),
    )
    return SimpleNamespace(run=run, sampler=SGLD(0.1))


def _row(epoch: int, samples: int) -> dict:
    return {
        "epoch": epoch,
        "potential": 25.0,
        "num_samples": samples,
        "test_metric": 0.5,
        "accept_rate": "",
    }


def test_at_a_terminal_a_bar_counts_the_epochs_from_where_the_run_starts(monkeypatch, caplog):
    """A resumed run's bar starts at its epoch, advances one per epoch, and carries the
    line's values; no progress line is logged beside it."""
    import io
    import shutil
    import sys

    from bdl.runner.progress import Progress

    terminal = io.StringIO()
    terminal.isatty = lambda: True
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(shutil, "get_terminal_size", lambda: shutil.os.terminal_size((120, 40)))
    caplog.set_level(logging.INFO, logger="bdl")
    progress = Progress(_experiment(), epoch=2)
    assert (progress.bar.total, progress.bar.n, progress.bar.unit) == (6, 2, "epoch")
    progress.update(_row(3, 1))
    assert progress.bar.n == 3
    assert progress.bar.postfix == "U/N=2.5, test_rmse=0.5000"
    progress.close()
    assert not [m for m in caplog.messages if m.startswith("epoch ")]


def test_off_a_terminal_a_line_every_log_every_epochs_and_the_last(caplog):
    from bdl.runner.progress import Progress

    caplog.set_level(logging.INFO, logger="bdl")
    progress = Progress(_experiment(epochs=5, log_every=2), epoch=0)
    assert progress.bar is None
    for epoch in range(1, 6):
        progress.update(_row(epoch, max(0, epoch - 2)))
    progress.close()
    assert [m for m in caplog.messages if m.startswith("epoch ")] == [
        "epoch 2/5  U/N 2.5  phase burn-in  samples 0",
        "epoch 4/5  U/N 2.5  test_rmse 0.5000  samples 2",
        "epoch 5/5  U/N 2.5  test_rmse 0.5000  samples 3",
    ]


def test_say_prints_the_line_bare_on_a_terminal_and_whole_in_the_log_file(tmp_path, capsys):
    """The verdict's lines fit 100 columns without the logger's prefix: a handler writing to the
    standard error gets the line alone, a file handler the formatted record."""
    logger = logging.getLogger("bdl")
    prefix = logging.Formatter("[%(name)s][%(levelname)s] - %(message)s")
    terminal, file = logging.StreamHandler(sys.stderr), logging.FileHandler(tmp_path / "run.log")
    for handler in (terminal, file):
        handler.setFormatter(prefix)
        logger.addHandler(handler)
    try:
        say(logging.WARNING, "NOT CONVERGED: too few draws")
    finally:
        for handler in (terminal, file):
            logger.removeHandler(handler)
        file.close()
    assert "NOT CONVERGED: too few draws\n" in capsys.readouterr().err.splitlines(keepends=True)
    assert (tmp_path / "run.log").read_text() == "[bdl][WARNING] - NOT CONVERGED: too few draws\n"
