r"""Langevin Monte Carlo / the Metropolis-adjusted Langevin algorithm (Rossky et al. 1978;
Roberts & Tweedie 1996).

Bühler, §4.2.2: HMC with a single leapfrog step, $L = 1$. From a fresh momentum
$p \sim \mathcal N(0, I)$,

$$
\begin{aligned}
q^* &= q - \frac{\epsilon^2}{2}\nabla U(q) + \epsilon p                        && (42)\\
p^* &= p - \frac{\epsilon}{2}\nabla U(q) - \frac{\epsilon}{2}\nabla U(q^*)      && (43)
\end{aligned}
$$

accepted with probability $\min[1, \exp(-(U(q^*) - U(q)) - \tfrac12\sum_i(p_i^{*2} -
p_i^2))]$ (eq. 44). With ``lr`` $=\epsilon^2$, eq. (42) is SGLD's update (Bühler, eq. 39)
and the kinetic-energy difference is the Hastings correction for its asymmetric Gaussian
proposal: ``mala`` at ``lr`` is ``sgld`` at ``lr`` made exact by a Metropolis test.

``approximate=True`` runs on minibatch closures and tests on the minibatch estimate of
$U$ at both ends (Ambrogioni, "approximate stochastic Langevin Monte Carlo": practical but not
guaranteed to converge to the posterior). It costs two minibatch gradients per step.
"""

from __future__ import annotations

from bdl.noise import Generator
from bdl.samplers.hmc import HMC
from bdl.samplers.metropolis import DIVERGENCE_THRESHOLD


class MALA(HMC):
    """HMC with $L = 1$ and a fresh momentum each iteration; ``lr`` is $\\epsilon^2$.

    The default ``target_accept`` 0.574 is the optimal acceptance rate of MALA in high dimension
    (Roberts & Rosenthal 1998).
    """

    def __init__(
        self,
        lr: float,
        approximate: bool = False,
        adapt: bool = True,
        target_accept: float = 0.574,
        divergence_threshold: float = DIVERGENCE_THRESHOLD,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(
            lr,
            num_steps=1,
            adapt=adapt,
            target_accept=target_accept,
            divergence_threshold=divergence_threshold,
            foreach=foreach,
            generator=generator,
        )
        self._on_minibatches(approximate)
