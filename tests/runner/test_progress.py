"""What a run shows while it runs, off a terminal: a line every ``log_every`` epochs with the
potential per datum, the phase or the running model average's metric, and the samples."""

import json
import logging
import re

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
