r"""Stochastic gradient descent on $U$: the MAP baselines ``sgd`` and ``sgd_momentum``.

Plain SGD (Bühler, eq. 32), $\theta \leftarrow \theta - \epsilon \nabla\tilde U(\theta)$,
finds the MAP estimate; the Gaussian prior's gradient in $U$ is its weight decay (Ambrogioni).
Heavy-ball momentum $\mu$ is SGHMC without injected noise with friction
$\alpha = 1 - \mu$ (Bühler, §4.2.3: "when the additional stochastic noise is removed,
SGHMC reduces to a stochastic gradient method with momentum"), so this class is exactly that,
and matches ``torch.optim.SGD(lr, momentum)``.
"""

from __future__ import annotations

from bdl.noise import Generator
from bdl.samplers.base import Declaration
from bdl.samplers.sghmc import SGHMC


class SGD(SGHMC):
    """SGD with learning rate ``lr`` and heavy-ball ``momentum`` in ``[0, 1)``."""

    declaration = Declaration(
        step_unit="per datum",
        injects_noise=False,
        vectorisable=True,
        backs_off=True,
        epoch_program=True,
    )

    def __init__(
        self,
        lr: float,
        momentum: float = 0.0,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        if not 0 <= momentum < 1:
            raise ValueError(f"sampler.momentum must be in [0, 1), got {momentum}")
        super().__init__(lr, alpha=1 - momentum, foreach=foreach, generator=generator)
        self.momentum = momentum
