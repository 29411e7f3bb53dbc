"""``bdl-eval``'s command line (`bdl.analysis.evaluate`): what cannot go together is refused in
one line before any run is read."""

from __future__ import annotations

import pytest

from bdl.analysis.evaluate import main


@pytest.mark.parametrize("other", ["split=validation", "dataset=boston", "dataset.split=1"])
def test_a_file_of_data_replaces_the_dataset_and_its_split(other, tmp_path, capsys):
    run_dir = tmp_path / "no-run-needed"
    assert main([str(run_dir), "data=points.safetensors", other]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "bdl-eval: error: data=FILE replaces dataset= and split=: give one or the other"
    ]
