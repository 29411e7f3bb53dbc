r"""Step-size schedules: a multiplier on the sampler's base step size at step ``t``.

A schedule also says when noise is injected and at which epochs a sample is kept. The runner
builds it with the run's length once the data are known (``_partial_: true`` in the configs).
"""

from __future__ import annotations

import math


class Schedule:
    """Constant step size; samples every ``thin`` epochs after ``burn_in``.

    Args:
        total_steps: ``K``, the number of sampler steps in the run.
        steps_per_epoch: minibatches per epoch.
    """

    def __init__(self, total_steps: int, steps_per_epoch: int) -> None:
        if total_steps < 1 or steps_per_epoch < 1:
            raise ValueError("a schedule needs at least one step per epoch and one step in all")
        self.total_steps = total_steps
        self.steps_per_epoch = steps_per_epoch

    def __call__(self, t: int) -> float:
        return 1.0

    def explores(self, t: int) -> bool:
        """True while the chain explores: the sampler then injects no noise."""
        return False

    def collects(self, epoch: int, burn_in: int, thin: int) -> bool:
        """Whether the state after (0-based) ``epoch`` is kept as a posterior sample."""
        return epoch >= burn_in and (epoch - burn_in + 1) % thin == 0

    @classmethod
    def extendable(cls) -> bool:
        """Whether a run on this schedule can be lengthened as it goes (``until_converged``):
        only the constant step's steps and draws depend on neither the run's length nor the
        position in it."""
        return cls is Schedule


Constant = Schedule


class Polynomial(Schedule):
    r"""Welling & Teh (2011): $\epsilon_t = a (b + t)^{-\gamma}$, $\gamma\in(0.5, 1]$.

    Returned as the multiplier $(1 + t/b)^{-\gamma}$ of the sampler's step size, which is
    therefore $\epsilon_0$ (i.e. $a = \epsilon_0 b^{\gamma}$). The decay satisfies
    $\sum\epsilon_t = \infty$, $\sum\epsilon_t^2 < \infty$ (Bühler, eq. 40).
    """

    def __init__(
        self, total_steps: int, steps_per_epoch: int, b: float = 1000.0, gamma: float = 0.55
    ) -> None:
        super().__init__(total_steps, steps_per_epoch)
        if not 0.5 < gamma <= 1:
            raise ValueError(f"schedule.gamma must be in (0.5, 1], got {gamma}")
        if not 0 < b < math.inf:
            raise ValueError(f"schedule.b must be positive and finite, got {b}")
        self.b = b
        self.gamma = gamma

    def __call__(self, t: int) -> float:
        return (1 + t / self.b) ** -self.gamma


class Cyclical(Schedule):
    r"""Cyclical cosine step sizes (Zhang et al., ICLR 2020, cSG-MCMC).

    $$
    \alpha_k = \frac{\alpha_0}{2}\Big[\cos\Big(\frac{\pi\,\mathrm{mod}(k, \lceil K/M\rceil)}
               {\lceil K/M\rceil}\Big) + 1\Big]
    $$

    for ``cycles`` $= M$ cycles over $K$ steps. In the first ``exploration``
    $= \beta$ fraction of each cycle the sampler runs without noise (an optimiser); in the
    rest it samples, and the last ``samples_per_cycle`` epochs of each cycle are kept.
    """

    def __init__(
        self,
        total_steps: int,
        steps_per_epoch: int,
        cycles: int = 4,
        exploration: float = 0.8,
        samples_per_cycle: int = 1,
    ) -> None:
        super().__init__(total_steps, steps_per_epoch)
        if cycles < 1:
            raise ValueError(f"schedule.cycles must be at least 1, got {cycles}")
        if not 0 <= exploration < 1:
            raise ValueError(f"schedule.exploration must be in [0, 1), got {exploration}")
        if samples_per_cycle < 1:
            raise ValueError("schedule.samples_per_cycle must be at least 1")
        self.cycles = cycles
        self.exploration = exploration
        self.samples_per_cycle = samples_per_cycle
        self.cycle_length = math.ceil(total_steps / cycles)

    def _phase(self, t: int) -> float:
        return (t % self.cycle_length) / self.cycle_length

    def __call__(self, t: int) -> float:
        return 0.5 * (math.cos(math.pi * self._phase(t)) + 1)

    def explores(self, t: int) -> bool:
        return self._phase(t) < self.exploration

    def collects(self, epoch: int, burn_in: int, thin: int) -> bool:
        last_step = (epoch + 1) * self.steps_per_epoch - 1
        steps_to_cycle_end = self.cycle_length - 1 - last_step % self.cycle_length
        in_last_epochs = steps_to_cycle_end < self.samples_per_cycle * self.steps_per_epoch
        return epoch >= burn_in and in_last_epochs and not self.explores(last_step)
