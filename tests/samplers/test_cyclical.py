"""cSGLD and cSGHMC (Zhang et al. 2020): the SG samplers under the cyclical schedule sample a
Gaussian at the ends of their cycles (the presets run in ``test_runner.py``)."""

import pytest
import torch

from bdl.samplers import SGHMC, SGLD
from bdl.schedules import Cyclical


@pytest.mark.parametrize(
    "make",
    [lambda g: SGLD(1.0, generator=g), lambda g: SGHMC(0.5, alpha=0.5, generator=g)],
    ids=["csgld", "csghmc"],
)
def test_cycle_ends_sample_a_gaussian(make):
    """U = ½θ² on 2,000 chains: 4 cycles of 10 epochs × 20 steps; the last epoch of each is
    kept. The sampling half of a cycle must be long against the relaxation time (here ~40
    relaxation times), or the exploration phase's pull to the mode shows in the samples."""
    params = [torch.zeros(2000, dtype=torch.float64)]

    def closure():
        return 0.5 * params[0].square(), [params[0].clone()]

    steps_per_epoch, epochs = 20, 40
    schedule = Cyclical(epochs * steps_per_epoch, steps_per_epoch, cycles=4, exploration=0.5)
    sampler = make(torch.Generator().manual_seed(0))
    state = sampler.init(params)
    kept = []
    for epoch in range(epochs):
        for i in range(steps_per_epoch):
            t = epoch * steps_per_epoch + i
            sampler.step(state, closure, lr_scale=schedule(t), noise=not schedule.explores(t))
        if schedule.collects(epoch, burn_in=0, thin=1):
            kept.append(params[0].clone())
    assert len(kept) == 4
    samples = torch.stack(kept)
    assert samples.var().item() == pytest.approx(1.0, rel=0.1)
