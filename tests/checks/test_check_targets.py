"""The effective sample size ``bdl-check`` reports, blank where arviz measured nothing."""

import numpy as np
import torch

from bdl.checks.check_targets import double_well, ess, gaussian_2d


def test_ess_blank_exactly_where_arviz_returns_its_cap():
    generator = torch.Generator().manual_seed(0)
    # 9 draws per chain: halves of 4, Geyer's sequence never runs and arviz returns M log10 M.
    few = torch.randn(50, 9, 2, generator=generator, dtype=torch.float64)
    assert np.isnan(ess(few)).all()
    # Independent draws, 200 per chain: an ESS near the 10,000 draws, not the cap 40,000.
    many = torch.randn(50, 200, 2, generator=generator, dtype=torch.float64)
    values = ess(many)
    assert not np.isnan(values).any() and (np.abs(values / 10_000 - 1) < 0.2).all()


def test_the_figures_of_the_quick_check_are_drawn(tmp_path):
    """bdl-check --quick's two figures: written, and not blank."""
    from matplotlib.image import imread

    double_well(quick=True, seed=0, out=tmp_path)
    gaussian_2d(quick=True, seed=0, out=tmp_path)
    for name in ("double_well.png", "gaussian_2d.png"):
        assert imread(tmp_path / name)[..., :3].std() > 0.05, name
