r"""Metropolis–Hastings machinery shared by ``hmc``, ``mala``, ``rwmh`` and ``naive_sghmc``.

**The test.** A proposal $x'$ from the current $x$ is accepted with probability
$\min[1, \exp(\log r)]$ (Bühler, eq. 11); for Hamiltonian proposals
$\log r = H(q, p) - H(q^*, p^*)$ with $H = U + \tfrac12\lVert p\rVert^2$
(eqs. 14–15, 29). Energies are computed in float64: on a network the potential is of order
$10^5$ and the differences that decide the test are of order one. A NaN or infinite energy
(a divergent trajectory) is a rejection, so a bad step size shows up as a low acceptance rate, never
as a crashed chain.

**Divergent transitions.** A proposal whose energy error $\Delta H = -\log r$ exceeds
$\Delta_{\max}$ (``divergence_threshold``, Stan's 1000; Betancourt 2017), or is not
finite, is a divergent transition: the integrator has left the region where it tracks the
Hamiltonian flow, typically because the step is too large for the posterior's narrowest scale
there, and the chain under-samples that region. Each test records it per chain in
``state.info["divergent"]`` (Stan's ``divergent__``); the runner counts them, its
``divergences``, per epoch (the curve's column) and after burn-in (``metrics.json``), and a run
with any after burn-in is not judged converged. (A chain whose potential blows up is another
thing, *diverged*: the run stops, `bdl.runner.loop.Loop.check_stability`.)

**The leapfrog** (eqs. 18–20), with $\epsilon$ the step and $L$ the number of steps,
is written as a half kick, $L - 1$ fused "kick ε, drift ε" steps and a closing half kick,
so that it evaluates $\nabla U$ exactly $L$ times:

$$
p \leftarrow p - \tfrac{\epsilon}{2}\nabla U(q),\quad
q \leftarrow q + \epsilon p,\quad
p \leftarrow p - \tfrac{\epsilon}{2}\nabla U(q).
$$

**Step-size units.** Every kernel here takes ``lr`` as $\epsilon^2$, the squared leapfrog
step, which is the step of Langevin dynamics: one leapfrog step from a fresh momentum is
$q^* = q - \tfrac{\epsilon^2}{2}\nabla U + \epsilon p$ (eq. 42), SGLD's update at
``lr`` $=\epsilon^2$. So ``mala`` at ``lr`` is ``sgld`` at ``lr`` plus a Metropolis test,
``rwmh`` at ``lr`` proposes SGLD's noise $\mathcal N(0, \mathrm{lr}\, I)$ without the drift,
and SGHMC's $\eta$ is the same $\epsilon^2$ (Chen et al. 2014, §3.3). The per-datum
``sampler.lr`` of the configs is $\epsilon^2 N$.

**Independent chains.** A closure may return ``U`` with a batch shape ``(C,)`` for ``C`` chains
stacked along the first dimension of every parameter tensor (the toy targets of
`bdl.checks.check` do); each chain then gets its own test, and kinetic energies are summed over
the remaining dimensions only.

**Step-size adaptation** (only when ``tune=True``, i.e. during burn-in, so that the sampled chain
is a fixed Markov kernel): the dual averaging of Hoffman & Gelman (2014, JMLR, Alg. 5) drives the
mean acceptance probability to ``target_accept`` by adapting $\log\epsilon$; after burn-in
the averaged iterate $\bar\epsilon$ is used. Its first iterations try steps up to ten times
the initial one, so it needs tens of burn-in iterations (``experiment=hmc_mnist`` uses 50, as
Izmailov et al. 2021); with only a few, set ``adapt=false``.

**Cache.** Kernels keep $(U, \nabla U)$ at the current position in their state
(``MetropolisState.current``), so an iteration costs exactly its proposal's evaluations;
``state.info["potential"]`` only reports that ``U``. Anything that changes ``U`` other than
through the parameters (a Gibbs update of prior hyperparameters between steps) must drop the
cache: `MetropolisSampler.potential_changed`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from bdl.closures import Closure, Evaluation
from bdl.noise import Generator, uniform
from bdl.samplers.base import Sampler, SamplerState


def kinetic_energy(
    momenta: list[Tensor], batch_shape: torch.Size, inverse_mass: list[Tensor] | None = None
) -> Tensor:
    r"""$\tfrac12 p^\top M^{-1} p$ in float64 ($M = I$ when ``inverse_mass`` is
    None, else the diagonal $M^{-1}$ shaped like ``momenta``), one value per chain of
    ``batch_shape``."""
    scales = inverse_mass or [None] * len(momenta)
    return sum(
        0.5
        * (p.double().square() if v is None else p.double().square() * v)
        .reshape(*batch_shape, -1)
        .sum(-1)
        for p, v in zip(momenta, scales, strict=True)
    )


def broadcast(mask: Tensor, like: Tensor) -> Tensor:
    """``mask`` (one entry per chain) shaped to broadcast against a parameter tensor ``like``."""
    return mask.reshape(mask.shape + (1,) * (like.dim() - mask.dim()))


def select_(accept: Tensor, current: list[Tensor], previous: list[Tensor]) -> None:
    """Keep ``current`` where ``accept`` holds and go back to ``previous`` elsewhere, in place."""
    for now, before in zip(current, previous, strict=True):
        now.copy_(torch.where(broadcast(accept, now), now, before))


def kick(momenta: list[Tensor], grads: list[Tensor], scale: float, foreach: bool) -> None:
    """$p \\leftarrow p - s\\,\\nabla U$."""
    if foreach:
        torch._foreach_add_(momenta, grads, alpha=-scale)
    else:
        for p, g in zip(momenta, grads, strict=True):
            p.add_(g, alpha=-scale)


def drift(
    params: list[Tensor],
    momenta: list[Tensor],
    scale: float,
    foreach: bool,
    inverse_mass: list[Tensor] | None = None,
) -> None:
    """$q \\leftarrow q + s\\,M^{-1}p$ ($M = I$ when ``inverse_mass`` is None)."""
    if foreach:
        velocities = momenta if inverse_mass is None else torch._foreach_mul(momenta, inverse_mass)
        torch._foreach_add_(params, velocities, alpha=scale)
    else:
        for i, (q, p) in enumerate(zip(params, momenta, strict=True)):
            q.add_(p if inverse_mass is None else p * inverse_mass[i], alpha=scale)


def leapfrog_program(
    evaluate: Callable[[list[Tensor]], Evaluation],
    params: list[Tensor],
    momenta: list[Tensor],
    start: Evaluation,
    step_size: Tensor,
    count: Tensor,
    inverse_mass: list[Tensor] | None,
) -> tuple[list[Tensor], list[Tensor], Tensor, list[Tensor]]:
    r"""``count`` leapfrog steps, each a drift and a whole kick,
    $q \leftarrow q + \epsilon M^{-1}p,\ p \leftarrow p - \epsilon\nabla U(q)$, from
    ``params`` and ``momenta`` with ``start`` the $(U, \nabla U)$ there: a trajectory as
    one program for ``torch.compile`` (a `bdl.closures.Program`), its loop a
    ``torch.while_loop``, so that no Python runs between the steps, and ``count`` and
    $\epsilon$ (0-dim tensors) change without a recompilation. ``evaluate(q)`` returns
    $(U, \nabla U)$ at ``q``, called at one place, inside the loop, so that its code is
    generated and compiled once (one step of $\epsilon = 0$ evaluates the start). Returns
    the end point's positions, momenta, $U$ and gradient, as new tensors."""
    size = len(params)

    def proceed(remaining: Tensor, *carried: Tensor) -> Tensor:
        return remaining > 0

    def leapfrog(remaining: Tensor, *carried: Tensor) -> tuple[Tensor, ...]:
        q, p = list(carried[:size]), list(carried[size : 2 * size])
        velocities = p if inverse_mass is None else torch._foreach_mul(p, inverse_mass)
        q = torch._foreach_add(q, torch._foreach_mul(velocities, step_size))
        value, grads = evaluate(q)
        p = torch._foreach_sub(p, torch._foreach_mul(grads, step_size))
        return (remaining - 1, *q, *p, value, *grads)

    value, grads = start
    # counted down from ``count``, an input: a counter made inside the program would be one more
    # kernel for Inductor to compile (half a second of every run's compilation on a CPU)
    _, *carried = torch.while_loop(proceed, leapfrog, (count, *params, *momenta, value, *grads))
    return carried[:size], carried[size : 2 * size], carried[2 * size], carried[2 * size + 1 :]


class LeapfrogUpdate:
    """The interior leapfrog step as a sampler's elementwise update (``_update_foreach`` and its
    loop twin): kick by ``step_size``, then drift by ``step_size`` (through the diagonal
    ``state.buffers["inverse_mass"]`` where the kernel adapts one); ``noise`` plays no part."""

    @staticmethod
    def _leapfrog(
        state: SamplerState, grads: list[Tensor], step_size: float, foreach: bool
    ) -> None:
        momenta, inverse_mass = state.buffers["momentum"], state.buffers.get("inverse_mass")
        kick(momenta, grads, step_size, foreach)
        drift(state.params, momenta, step_size, foreach, inverse_mass)

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        self._leapfrog(state, grads, step_size, foreach=True)

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        self._leapfrog(state, grads, step_size, foreach=False)


#: Stan's $\Delta_{\max}$: an energy error above it is a divergent transition.
DIVERGENCE_THRESHOLD = 1000.0


def check_divergence_threshold(threshold: float) -> None:
    if not 0 < threshold <= math.inf:  # False for NaN
        raise ValueError(
            f"sampler.divergence_threshold must be positive, got {threshold} (Stan's is 1000)"
        )


def metropolis_test(
    state: SamplerState,
    log_ratio: Tensor,
    generator: Generator,
    threshold: float = DIVERGENCE_THRESHOLD,
) -> Tensor:
    """Accept with probability ``min(1, exp(log_ratio))``; records the diagnostics in
    ``state.info`` (``accepted``, ``accept_prob``, ``energy_error`` = −log r, and ``divergent``,
    an energy error above ``threshold`` or not finite) and returns the boolean decision per
    chain."""
    log_ratio = log_ratio.double()
    draws = uniform(log_ratio.shape, generator, log_ratio.device)
    accept = draws.log() < log_ratio  # False for NaN: a divergent proposal is rejected
    state.info["accepted"] = accept
    state.info["accept_prob"] = torch.nan_to_num(log_ratio.clamp(max=0).exp(), nan=0.0)
    state.info["energy_error"] = -log_ratio
    state.info["divergent"] = ~(-log_ratio <= threshold)  # NaN and -inf ratios too
    return accept


@dataclass
class DualAveraging:
    """Hoffman & Gelman (2014), Alg. 5, on the log of a multiplier ``x`` of the step size.

    $\\bar H_m = (1 - \\tfrac{1}{m + t_0})\\bar H_{m-1} + \\tfrac{1}{m+t_0}(\\delta - a_m)$,
    $\\log x_m = \\mu - \\tfrac{\\sqrt m}{\\gamma}\\bar H_m$,
    $\\log\\bar x_m = m^{-\\kappa}\\log x_m + (1 - m^{-\\kappa})\\log\\bar x_{m-1}$, with
    their constants and $\\mu = \\log 10$ (propose steps larger than the initial one).
    """

    target: float
    mu: float = math.log(10.0)
    gamma: float = 0.05
    t0: float = 10.0
    kappa: float = 0.75
    count: int = 0
    h_bar: float = 0.0
    log_x: float = 0.0
    log_x_avg: float = 0.0

    def update(self, accept_prob: float) -> None:
        self.count += 1
        m = self.count
        weight = 1.0 / (m + self.t0)
        self.h_bar = (1 - weight) * self.h_bar + weight * (self.target - accept_prob)
        self.log_x = self.mu - math.sqrt(m) / self.gamma * self.h_bar
        eta = m**-self.kappa
        self.log_x_avg = eta * self.log_x + (1 - eta) * self.log_x_avg

    def restarted(self, *, explore: bool) -> DualAveraging:
        """A fresh adaptation around the current step, the statistics emptied: Stan's
        $\\mu = \\log 10 x$ after each mass-matrix update, which first proposes a step ten
        times larger and needs tens of iterations to come back; ``explore=False`` shrinks towards
        the current step instead, $\\mu = \\log x$, for an interval too short for that
        (a few iterations of the larger steps would dominate the averaged, frozen step)."""
        mu = math.log(10.0) + self.log_x if explore else self.log_x
        return DualAveraging(target=self.target, mu=mu, log_x=self.log_x)

    def multiplier(self, tune: bool) -> float:
        """The current iterate while tuning, the averaged one afterwards."""
        return math.exp(self.log_x if tune else self.log_x_avg)


@dataclass
class MetropolisState(SamplerState):
    adaptation: DualAveraging = field(default_factory=lambda: DualAveraging(target=0.8))
    #: ``(U, ∇U)`` at the current position since the last step, ``U`` in float64; None where
    #: there is none to reuse (before the first step, after `MetropolisSampler.potential_changed`)
    current: Evaluation | None = None


class MetropolisSampler(Sampler):
    """Base of the kernels with a Metropolis test on the full-data potential (or, where a subclass
    declares itself not ``full_batch``, on minibatch estimates of it).

    Args:
        lr: $\\epsilon^2$ on the scale of ``U`` (see the module docstring).
        adapt: adapt the step size by dual averaging while ``tune=True`` (burn-in).
        target_accept: the mean acceptance probability the adaptation aims at.
        divergence_threshold: $\\Delta_{\\max}$, the energy error above which a
            transition is divergent (Stan's 1000; see the module docstring).

    ``noise=False`` (the exploration phase of a cyclical schedule) is ignored: the proposal noise
    of a Metropolis kernel is part of what makes it leave the posterior invariant.
    """

    def __init__(
        self,
        lr: float,
        adapt: bool = True,
        target_accept: float = 0.8,
        divergence_threshold: float = DIVERGENCE_THRESHOLD,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if not 0 < target_accept < 1:
            raise ValueError(f"sampler.target_accept must be in (0, 1), got {target_accept}")
        check_divergence_threshold(divergence_threshold)
        self.adapt = adapt
        self.target_accept = target_accept
        self.divergence_threshold = divergence_threshold

    def init(self, params: list[Tensor]) -> MetropolisState:
        return MetropolisState(
            params=list(params), adaptation=DualAveraging(target=self.target_accept)
        )

    def _on_minibatches(self, approximate: bool) -> None:
        """``approximate=True``, a choice of the user's: this sampler tests on minibatch
        estimates of ``U`` (Ambrogioni's approximate test), so it declares itself not
        ``full_batch`` and the runner passes it minibatch closures."""
        if approximate:
            self.declaration = dataclasses.replace(type(self).declaration, full_batch=False)

    def potential_changed(self, state: MetropolisState) -> None:
        state.current = None

    def _scale(self, state: MetropolisState, lr_scale: float, tune: bool) -> float:
        r"""This iteration's $\epsilon = \sqrt{\mathrm{lr}\cdot\mathrm{lr\_scale}}\,x$."""
        multiplier = state.adaptation.multiplier(tune) if self.adapt else 1.0
        return math.sqrt(self.step_size(lr_scale)) * multiplier

    def _current(self, state: MetropolisState, closure: Closure) -> tuple[Tensor, list[Tensor]]:
        """``(U, ∇U)`` at the current position: cached since the last step, unless
        `potential_changed` dropped them or the test is on minibatches (each step then
        brings another minibatch, whose ``U`` must be evaluated at both ends)."""
        if self.declaration.full_batch and state.current is not None:
            return state.current
        state.grad_evals += 1
        return closure()

    def _finish(
        self,
        state: MetropolisState,
        accept: Tensor,
        start: tuple[Tensor, list[Tensor]],
        end: tuple[Tensor, list[Tensor]],
        tune: bool,
    ) -> None:
        """Keep the end point's ``(U, ∇U)`` where accepted and the start's elsewhere as the
        current one (the parameters themselves are restored by the caller), report ``U``, adapt,
        count the iteration."""
        (start_u, start_grads), (end_u, end_grads) = start, end
        select_(accept, end_grads, start_grads)
        state.current = (torch.where(accept, end_u.double(), start_u.double()), end_grads)
        state.info["potential"] = state.current[0]
        if tune and self.adapt:
            state.adaptation.update(state.info["accept_prob"].mean().item())
        state.step += 1
