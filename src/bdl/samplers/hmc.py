r"""Hamiltonian Monte Carlo on the full-data potential (Duane et al. 1987; Neal 2011).

Bühler, §3.3.4. Each iteration

1. refreshes the momentum, $p' = \alpha p + (1 - \alpha^2)^{1/2} r$,
   $r \sim \mathcal N(0, I)$ (eq. 41; ``refresh`` $=\alpha$; 0 draws a fresh
   momentum, the standard algorithm),
2. runs $L$ leapfrog steps of size $\epsilon$ (eqs. 18–20) from $(q, p')$ to
   $(q^*, p^*)$,
3. accepts $q^*$ with probability
   $\min[1, \exp(-U(q^*) + U(q) - K(p^*) + K(p'))]$ (eq. 29), $K = \tfrac12\lVert
   p\rVert^2$; on rejection $q$ is kept and the momentum negated (Neal 2011, §5.3: with
   partial refresh the proposal's momentum flip is undone on acceptance and kept on rejection,
   so that the chain on $(q, p)$ stays reversible).

With ``mass="diagonal"`` the kinetic energy is $K(p) = \tfrac12 p^\top M^{-1} p$ with a
diagonal $M^{-1}$ learnt from the chain's draws during burn-in in Stan's windows
(`bdl.samplers.mass`) and frozen before the first kept sample (``mass="fisher"``: from the
draws and the potential's gradients at them, Seyboldt, Carlson & Carpenter 2026): the momentum
is drawn from $\mathcal N(0, M)$ and the drift is $q \leftarrow q + \epsilon M^{-1} p$. With
``adapt_length=True`` each iteration integrates for a jittered time $u_n T$ and $T$
is learnt across stacked chains during burn-in by ChEES (`bdl.samplers.chees`; Hoffman,
Radul & Sountsov 2021), starting from ``trajectory_length`` (or ``num_steps`` times the first
step) and averaged before the first kept sample.

``lr`` is $\epsilon^2$ (see `bdl.samplers.metropolis`), so the per-datum
``sampler.lr`` is $\epsilon^2 N$. ``num_steps`` gives $L$; ``trajectory_length``
$\tau$ gives $L = \lceil\tau/\epsilon\rceil$ instead, which keeps the trajectory's
length when the step size is adapted or scheduled. The kernel is ``full_batch``: the runner
passes a closure that accumulates the full-data ``U`` (in float64) and its gradient chunk by
chunk (`bdl.potential.Potential.full_closure`), so memory is that of one chunk and one
leapfrog step costs one pass over the data.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from bdl.closures import Closure, Evaluation
from bdl.noise import Generator, chain_shape
from bdl.samplers import chees
from bdl.samplers import mass as windowed
from bdl.samplers.base import Declaration
from bdl.samplers.metropolis import (
    DIVERGENCE_THRESHOLD,
    LeapfrogUpdate,
    MetropolisSampler,
    MetropolisState,
    drift,
    kick,
    kinetic_energy,
    leapfrog_program,
    metropolis_test,
    select_,
)

MASSES = ("unit", *windowed.ESTIMATES)


@dataclass
class HMCState(MetropolisState):
    mass_windows: windowed.MassWindows = field(default_factory=windowed.MassWindows)
    length: chees.ChEES = field(default_factory=chees.ChEES)


class HMC(LeapfrogUpdate, MetropolisSampler):
    """HMC with $\\epsilon^2 =$ ``lr`` and ``num_steps`` (or ``trajectory_length``).

    Args:
        lr: $\\epsilon^2$ on the scale of ``U``.
        num_steps: $L$, leapfrog steps per iteration (``None`` with ``trajectory_length``).
        trajectory_length: $\\tau$; $L = \\lceil\\tau/\\epsilon\\rceil$.
        refresh: $\\alpha \\in [0, 1)$ of the partial momentum refresh (0: resample).
        adapt: dual-averaging adaptation of $\\epsilon$ during burn-in.
        target_accept: the acceptance rate the adaptation aims at.
        mass: ``"unit"`` ($M = I$), or ``"diagonal"`` (the draws' variances) or ``"fisher"``
            (their ratio to the gradients', rooted), learnt during burn-in; the runner says how
            long burn-in is through `plan_burn_in`.
        adapt_length: learn the jittered trajectory's length $T$ across stacked chains
            during burn-in (ChEES), from ``trajectory_length`` or ``num_steps`` $\\epsilon$.
        divergence_threshold: $\\Delta_{\\max}$: a trajectory whose energy error
            $H(q^*, p^*) - H(q, p')$ exceeds it is a divergent transition (Stan's 1000).
    """

    declaration = Declaration(step_unit="per datum", full_batch=True, vectorisable=True)

    def __init__(
        self,
        lr: float,
        num_steps: int | None = 50,
        trajectory_length: float | None = None,
        refresh: float = 0.0,
        adapt: bool = True,
        target_accept: float = 0.8,
        mass: str = "unit",
        adapt_length: bool = False,
        divergence_threshold: float = DIVERGENCE_THRESHOLD,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(
            lr, adapt, target_accept, divergence_threshold, foreach=foreach, generator=generator
        )
        if (num_steps is None) == (trajectory_length is None):
            raise ValueError(
                "give exactly one of sampler.num_steps and sampler.trajectory_length "
                f"(got {num_steps} and {trajectory_length}): set the other to null"
            )
        if num_steps is not None and num_steps < 1:
            raise ValueError(f"sampler.num_steps must be ≥ 1, got {num_steps}")
        if trajectory_length is not None and not 0 < trajectory_length < math.inf:
            raise ValueError(
                f"sampler.trajectory_length must be positive and finite, got {trajectory_length}"
            )
        if not 0 <= refresh < 1:
            raise ValueError(f"sampler.refresh must be in [0, 1), got {refresh}")
        if mass not in MASSES:
            raise ValueError(f"sampler.mass must be one of {', '.join(MASSES)}, got {mass!r}")
        self.num_steps = num_steps
        self.trajectory_length = trajectory_length
        self.refresh = refresh
        self.mass = mass
        self.adapt_length = adapt_length
        self.windows: list[tuple[int, int]] = []
        self.burn_in = 0

    def plan_burn_in(self, steps: int) -> None:
        if self.mass == "unit":
            return
        self.burn_in = steps
        self.windows = windowed.slow_windows(steps)
        if not self.windows:
            raise ValueError(
                f"sampler.mass={self.mass} learns the mass from burn-in, and {steps} iterations "
                f"are too few (Stan's least is {windowed.SHORTEST_BURN_IN}): raise burn_in or set "
                "sampler.mass=unit"
            )

    def init(self, params: list[Tensor]) -> HMCState:
        base = super().init(params)
        state = HMCState(params=base.params, adaptation=base.adaptation)
        state.buffers["momentum"] = [torch.zeros_like(p) for p in params]
        if self.mass != "unit":
            state.buffers.update(windowed.init_buffers(params, self.mass))
        return state

    def _leapfrog_steps(self, state: HMCState, epsilon: float, tune: bool) -> int:
        if self.adapt_length:
            length = state.length
            if length.log_length is None:
                length.log_length = math.log(self.trajectory_length or self.num_steps * epsilon)
            return max(1, math.ceil(length.jitter() * length.length(tune) / epsilon))
        if self.num_steps is not None:
            return self.num_steps
        return max(1, math.ceil(self.trajectory_length / epsilon))

    def _refresh_momentum(self, momenta: list[Tensor], inverse_mass: list[Tensor] | None) -> None:
        draws = self.gaussian_like(momenta)
        if inverse_mass is not None:  # N(0, M): scaled by M^{1/2}
            torch._foreach_div_(draws, torch._foreach_sqrt(inverse_mass))
        if self.refresh == 0:
            torch._foreach_copy_(momenta, draws)
        else:
            torch._foreach_mul_(momenta, self.refresh)
            torch._foreach_add_(momenta, draws, alpha=math.sqrt(1 - self.refresh**2))

    @torch.no_grad()
    def step(
        self,
        state: HMCState,
        closure: Closure,
        lr_scale: float = 1.0,
        noise: bool = True,
        tune: bool = False,
    ) -> HMCState:
        epsilon = self._scale(state, lr_scale, tune)
        num_steps = self._leapfrog_steps(state, epsilon, tune)
        start = self._current(state, closure)
        start_u, grads = start
        momenta, inverse_mass = state.buffers["momentum"], state.buffers.get("inverse_mass")
        self._refresh_momentum(momenta, inverse_mass)
        start_params = [q.clone() for q in state.params]
        start_momenta = [p.clone() for p in momenta] if self.refresh > 0 else None
        start_energy = start_u.double() + kinetic_energy(momenta, start_u.shape, inverse_mass)

        kick(momenta, grads, epsilon / 2, self.foreach)
        end_u, grads = self._trajectory(state, closure, start, epsilon, num_steps, noise)
        state.grad_evals += num_steps

        end_energy = end_u.double() + kinetic_energy(momenta, end_u.shape, inverse_mass)
        accept = metropolis_test(
            state, start_energy - end_energy, self.generator, self.divergence_threshold
        )
        if tune and self.adapt_length:
            jitter = state.length.jitter()
            gradient = chees.gradient(
                start_params, state.params, momenta, state.info["accept_prob"], inverse_mass, jitter
            )
            state.length.update(gradient, epsilon)
        if self.adapt_length:
            state.info["trajectory_length"] = torch.tensor(state.length.length(tune))
            state.length.iterations += 1
        select_(accept, state.params, start_params)
        if start_momenta is not None:
            torch._foreach_neg_(start_momenta)
            select_(accept, momenta, start_momenta)
        self._finish(state, accept, start, (end_u, grads), tune)
        state.info["step_size"] = torch.tensor(epsilon)
        if tune and self.windows:
            self._learn_mass(state, chain_dims=start_u.dim())
        return state

    def _current(self, state: HMCState, closure: Closure) -> Evaluation:
        """``(U, ∇U)`` at the current position; where nothing is cached and the closure offers a
        program, by the trajectories' own program, one step of size 0, which spares a second
        compilation (of the closure's gradient) its seconds."""
        if state.current is None:
            device = state.params[0].device
            value = torch.zeros(chain_shape(self.generator), dtype=torch.float64, device=device)
            grads = [torch.zeros_like(p) for p in state.params]
            start = self._leapfrog_program(state, closure, (value, grads), 0.0, 1)
            if start is not None:
                state.grad_evals += 1
                return start[2], list(start[3])
        return super()._current(state, closure)

    def _trajectory(
        self,
        state: HMCState,
        closure: Closure,
        start: Evaluation,
        epsilon: float,
        num_steps: int,
        noise: bool,
    ) -> Evaluation:
        """The rest of the trajectory after its first half kick, in place: ``num_steps`` drifts,
        and kicks between them, then the closing half kick; returns ``U`` and its gradient at
        the end point. As one compiled program where the closure offers one (``compile=true``),
        else step by step through the closure."""
        momenta, inverse_mass = state.buffers["momentum"], state.buffers.get("inverse_mass")
        end = self._leapfrog_program(state, closure, start, epsilon, num_steps)
        if end is not None:
            params, end_momenta, value, grads = end
            torch._foreach_copy_(state.params, params)
            torch._foreach_copy_(momenta, end_momenta)
            grads = list(grads)
            kick(momenta, grads, -epsilon / 2, self.foreach)  # its last kick was a whole one
            return value, grads
        drift(state.params, momenta, epsilon, self.foreach, inverse_mass)
        update = self._update_foreach if self.foreach else self._update_loop
        for _ in range(num_steps - 1):
            _, grads = closure()
            update(state, grads, epsilon, noise)
        value, grads = closure()
        kick(momenta, grads, epsilon / 2, self.foreach)
        return value, grads

    def _leapfrog_program(
        self, state: HMCState, closure: Closure, start: Evaluation, epsilon: float, count: int
    ) -> tuple[list[Tensor], list[Tensor], Tensor, list[Tensor]] | None:
        """`leapfrog_program` from the state's position and momenta, run by the closure's
        `Program`; None where it has none or it failed to compile."""
        program = getattr(closure, "program", None)
        if program is None:
            return None
        like = state.params[0]
        return program(
            leapfrog_program,
            state.params,
            state.buffers["momentum"],
            start,
            torch.tensor(epsilon, dtype=like.dtype, device=like.device),
            torch.tensor(count, device=like.device),
            state.buffers.get("inverse_mass"),
        )

    def _learn_mass(self, state: HMCState, chain_dims: int) -> None:
        """Add this burn-in iteration's position to its slow window; at the window's end, set
        $M^{-1}$ from it and restart the step size's adaptation."""
        windows, index = state.mass_windows, state.mass_windows.tune_steps
        windows.tune_steps += 1
        for start, end in self.windows:
            if start <= index < end:
                windows.draws += 1
                windowed.add_draw(state.buffers, state.params, windows.draws, state.current[1])
                if index + 1 == end:
                    inverse_mass = state.buffers["inverse_mass"]
                    before = [v.clone() for v in inverse_mass] if self.adapt_length else None
                    windowed.close_window(state.buffers, windows.draws, chain_dims)
                    windows.draws = 0
                    # Stan's terminal interval left for the step size and the length to settle
                    time_to_settle = self.burn_in - end >= windowed.TERM_BUFFER
                    state.adaptation = state.adaptation.restarted(explore=time_to_settle)
                    if before is not None:
                        state.length.remeasure(before, inverse_mass, restart=time_to_settle)
                return
