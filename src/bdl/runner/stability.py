r"""What a healthy chain's potential does, and what the runner does when a chain's does not.

**The yardstick.** Near a mode, a posterior in $d$ dimensions is close to Gaussian, and
under it $U(\theta) - U(\theta^\ast)$ follows a $\mathrm{Gamma}(d/2, 1)$ distribution
($\tfrac12\chi^2_d$): a chain at stationarity sits about $d/2$ above the mode, with a
spread of $\sqrt{d/2}$, whatever the data set or the parametrisation; at a temperature
$T$ this holds for $U_T$. `rise_limit` is the rise an exact sampler exceeds with probability
`TAIL` at any one epoch, the Gamma's upper quantile. A rise past it is not noise: the chain
is heating up (a step too large for the posterior's curvature), or has left for a worse region.

**Below T = 1** an SG-MCMC chain is not exact: the minibatch gradients' noise heats it too, and
under the tempered dynamics (`bdl.potential`: the step on ``U`` kept at every $T$, the
injected noise's variance scaled by $T$) that noise, and the heat it brings, in units of
``U``, is the same at every $T$, while the injected noise cools. A cold chain therefore rises, in
``U``, no more than the same chain at $T = 1$, where the yardstick holds (the measured
``rise_max`` below), but in $U_T = U/T$ by up to $1/T$ times more than an exact sampler at
$T$: SGHMC on Fashion-MNIST at $T = 0.003$ rose $6\cdot 10^5$ in $U_T$ in an epoch, 1800 in
``U``, more than the 8 limits of $4.1\cdot 10^4$ allowed after burn-in, and was stopped as
diverged, while the chains at $T = 0.001$ and $0.01$ beside it completed. So the limit
below $T = 1$ is $T = 1$'s on ``U``, `rise_limit` divided by $T$ on $U_T$. A step too large
for the posterior's curvature is the same step on ``U`` at every $T$, and blows up in ``U`` as
it does at $T = 1$: by orders of magnitude more than the limit. (For an exact kernel, HMC, the
limit below $T = 1$ is then loose by $1/T$; its divergences are its energy errors'.)

**During burn-in** (samplers that declare ``backs_off``: the SG-MCMC kernels, whose step unit, a
learning rate per datum, does not transfer between data sets; the Metropolis kernels adapt their
step by dual averaging instead), each chain keeps its level, the lowest epoch-mean potential of
its last `WINDOW` epochs, and a snapshot of the state it began that epoch in. An epoch whose
mean potential rises more than `rise_limit` above that level, or is not finite, restores
the chain to its snapshot and halves the run's step (every chain's, as HMC's pooled adaptation
shares one step size). The step is frozen when burn-in
ends, so that the samples kept come from one fixed kernel (unless a climb after burn-in backs it
off: below); where burn-in backed off, at half the
last step that held, since a step that had to be backed off from sits near its limit, and the
limit itself moves as the fit sharpens (a sampled noise precision grows a hundredfold on yacht,
and the curvature with it). This is the backing-off half of the
step-size adaptation that the literature recommends for SG-MCMC (Welling & Teh 2011 decrease the
step until it is stable; Chen et al. 2014 tune it on the data set), made automatic.

Measured on yacht (the UCI protocol, full batches): SGHMC at its MNIST step, ``lr`` 0.1 per datum,
heats up within 30 steps (the sampled noise precision falls from 9 to 1e-12) and completed with a
test RMSE of 74 380 before this existed; its healthy chains at a hundredth of that step rise at
most 44 above their level (``rise_limit`` = 297 for its 402 parameters).

**The window.** A step too large heats the chain within epochs: SGHMC at its MNIST step on yacht
within 30 steps (above), kin8nm's climb (below) from 742 to 3855 in 10. A chain's own climbs
are slow: from where it starts to where it is stationary, and as Gibbs-sampled
hyperparameters move (a hierarchical prior's precisions fall as the weights grow, raising
$-\tfrac d2\log\lambda$: on MNIST, Chen et al.'s Gamma hyperprior raises ``U/N`` from -0.29 to
0.47 over epochs 10-50 of burn-in). So the level forgets all but the last `WINDOW` epochs.
Measured on the UCI protocol's full batches (``experiment=uci_sghmc protocol=uci_converged``, 4
chains, 15 000 steps of burn-in): the chains start at a lower potential than the one they are
stationary at, and climb to it as the weights grow (yacht, from about 370 to 600-680 in 450
steps; Boston, from about 480 to 1250 in 15 000). With the level the lowest of the last tenth of
burn-in (1500 steps), as it was, that climb passed the limit, was backed off to its start,
climbed again at half the step, and the step was frozen at 1/32 (yacht, chains seeded 4-7) and
1/64 (Boston) of the others': neither run passed the verdict within 120 000 steps. Over the
last 10 epochs, those chains' burn-in rose at most 0.13 limits, no step was backed off, and
both passed at step 106 125.

**After burn-in** a chain whose epoch-mean potential exceeds its level by more than
`DIVERGENCE_LIMITS` times `rise_limit` has left its level. For samplers that back off and keep
draws, the step frozen at burn-in's end may become too large later on: the limit moves on as the
fit sharpens. On kin8nm (``experiment=uci_sghmc``, split 0: full batches, 2000 steps of
burn-in), the sampled noise precision grew after burn-in, and at 15.4 ``U`` rose from 742 at
step 7904 to 3855 at step 7914; the run was stopped there as diverged (power's split 0 alike, at
step 4929), its draws unscored. Such a climb is therefore backed off as in burn-in, but for the
rest of the run: the chain returns to where its last epoch within one
`rise_limit` of the level began, its momentum at rest, and the step of every chain is halved.
Not to where the last epoch within the divergence limit began: an epoch's potential measures
the state it began in and the steps taken from it, so the state at its end is judged by the
next epoch, and a rise past one limit, which a stationary chain makes once in 10^9 epochs, is
the climb beginning (kin8nm's epoch 7913 rose 4 limits and stood). The draws kept since that
point, states the climb had begun in, are dropped, from the model averages, the per-sample
diagnostics and the store, and the backed-off epoch keeps none; each chain keeps its averages
as they were at that point for that (`bdl.runner.loop.Loop.snapshot_averages`), and both the
state and the averages are in the checkpoint. On kin8nm the chain returned to step 7910 and came
back to its level within 30 steps (test RMSE 0.0727). The run's draws then come from more than
one step size, which ``metrics.json`` (``backoffs_after_burn_in``, ``step_scale``) and a note of
the verdict say. A state that is not finite, a climb once `MAX_BACKOFFS` halvings are spent,
and a climb of a kernel that does not back off (HMC, whose step adapts by dual averaging, and
the optimisers, whose limit is an explosion) end the run with status ``diverged`` and one line
naming the cause and the fix. The factor is set from the spread of
healthy runs, ``rise_max`` in their ``metrics.json`` (``scripts/matrix.py`` collects it). At
every sampler's defaults on yacht and boston the largest was 0.34 (``psgld``; the others
0.02-0.24: the matrix in the results page), on MNIST 0.06 for SGHMC and 0.14 with the Gamma
hyperprior (53 epochs). On Boston's run until converged, two chains rose 3.4 and
1.9 limits within 5 steps, long after burn-in, and came back on their own. Measured
against the lowest potential of the whole run instead of the last epochs', and with no halving at
the freeze, the cyclical schedules, whose every cycle restarts at a large step, rose 3.1
(``sghmc_cyclical``) and 3.4 (``sgld_cyclical``) on yacht and completed sound: the factor leaves
room for those. A diverging chain rises by hundreds or millions of limits.
"""

from __future__ import annotations

import logging

import torch
from scipy.special import gammainccinv
from torch import Tensor

log = logging.getLogger("bdl")

#: The per-epoch probability with which an exact sampler's rise exceeds `rise_limit`.
#: A potential above this multiple of its starting value (or of N, if larger) has diverged, for
#: optimisers and variational fits, whose objective has no stationary spread: no fit recovers
#: from a jump of six orders of magnitude, and a NaN would follow.
DIVERGENCE_FACTOR = 1e6
#: How the messages name the chain of a run of one.
ONE_CHAIN = "the chain"
TAIL = 1e-9
#: After burn-in, a rise above the level of this many `rise_limit` is a divergence.
DIVERGENCE_LIMITS = 8.0
#: The epochs over which a chain's level is its lowest mean potential (the module's docstring:
#: `bdl.runner.stability`, "The window").
WINDOW = 10
#: Halvings of the step, during burn-in and after it, after which the chain is declared diverged:
#: a step 2^-20 of the configured one is no longer a setting to fix by halving.
MAX_BACKOFFS = 20


def rise_limit(dimensions: int, temperature: float = 1.0) -> float:
    r"""The rise of the potential $U_T$ above its mode that a $\mathrm{Gamma}(d/2, 1)$
    variable exceeds with probability `TAIL` (its upper quantile), at a ``temperature``
    $T \ge 1$; below, that rise at $T = 1$ on ``U``, which is $1/T$ times it on $U_T$ (the
    module's docstring: the minibatch gradients' noise does not cool with $T$)."""
    return float(gammainccinv(dimensions / 2, TAIL)) / min(temperature, 1.0)


def snapshot(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Copies of ``tensors``, detached: a chain's state to return to."""
    return {name: t.detach().clone() for name, t in tensors.items()}


@torch.no_grad()
def restore(live: dict[str, Tensor], saved: dict[str, Tensor]) -> None:
    """Write ``saved`` into the tensors of ``live`` in place (stacked chains' states are views of
    one stacked tensor, which must see the restored values). Entries that the state gained since
    the snapshot (an online noise estimate begun later) keep their values."""
    for name, t in saved.items():
        if name in live:
            live[name].copy_(t)


class DivergedError(RuntimeError):
    """The chain's potential or parameters became non-finite, or the potential climbed past its
    limit after burn-in (or exploded, for an optimiser)."""


def rounded(value: float | None) -> str:
    """A potential for a message: 4 significant digits, or "none" before there is one."""
    return "none" if value is None else f"{value:.4g}"
