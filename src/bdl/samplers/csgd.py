r"""Constant SGD as approximate Bayesian inference (Mandt, Hoffman & Blei, JMLR 2017).

SGD with a constant step is a Markov chain whose stationary distribution, near a mode where the
loss is quadratic and the gradient noise constant, is Gaussian (an Ornstein–Uhlenbeck process,
Bühler, eqs. 33–35). Choosing the step to minimise the KL divergence from that Gaussian to the
posterior makes the iterates approximate posterior samples, with no noise injected at all: the
minibatch noise is the noise.

**Mandt et al.'s result** (Bühler, eqs. 36–38), for SGD $\theta \leftarrow \theta -
\varepsilon\,\hat g$ on the per-datum average loss, with minibatch gradient $\hat g$ of
covariance $BB^\top/n$ ($BB^\top$ the per-example gradient covariance, $n$ the
minibatch size, $D$ the dimension, $N$ the dataset size):

$$
\varepsilon^* = 2\,\frac{n}{N}\,\frac{D}{\mathrm{Tr}(BB^\top)}, \qquad
H^*_{kk} = \frac{2n}{N\,(BB^\top)_{kk}} \quad \text{(diagonal preconditioner)}.
$$

**In our units.** Our potential is $U = N\times$ that loss, so $\nabla\tilde U = N\hat
g$ and a step $h$ on $U$ is $\varepsilon = hN$. The spread of minibatch
gradients of $U$ that we can measure is $V = \mathrm{Var}[\nabla\tilde U] =
N^2 BB^\top/n$ elementwise, i.e. $(BB^\top)_{kk} = nV_k/N^2$. Substituting,

$$
h^* = \frac{\varepsilon^*}{N} = \frac{2D}{\sum_k V_k}, \qquad
h_k = \frac{H^*_{kk}}{N} = \frac{2}{V_k},
$$

free of $n$ and $N$. It is the Langevin condition in disguise: $\theta \leftarrow
\theta - h\nabla U + h\xi$, $\mathrm{Var}\,\xi = V$, is SGLD with step $s = 2h$ when its
noise $h^2 V$ equals $s$, i.e. $h = 2/V$. ``U`` already carries the temperature,
so the same formula targets $\exp(-U/T)$.

**Procedure.** While ``tune=True`` (burn-in) the kernel is plain SGD with step ``lr`` (times the
schedule's multiplier), reaching the mode's neighbourhood, while $V$ is estimated from the
spread of its minibatch gradients (`bdl.samplers.gradient_noise`). At the first step after
burn-in it fixes $h^*$ (``preconditioner: scalar``) or $h_k$ (``diagonal``) and keeps
them for the rest of the run; the schedule's multiplier still applies. Coordinates whose gradient
has (almost) no minibatch noise — the input weights of always-black MNIST pixels, driven by the
prior alone — cannot be sampled by constant SGD ($H^*$ is infinite there); their variance is
floored at ``variance_floor`` times the mean of $V$ so that their step stays finite.

**Stability.** SGD with step $h$ diverges along the top eigenvector of $\nabla^2 U$
once $h > 2/\lambda_{\max}$, while $h^*$ follows the mean gradient noise, and with it
the mean curvature. The optimum is therefore stable only for a posterior close to an isotropic
Gaussian; on neural networks it is not (``scripts/csgd_stability.py`` measures the ratio: about 300
on MNIST's MLP, 2.4 on yacht's on minibatches of 32), and a diverged chain's message says so
(`divergence_fix`). Without minibatches there is no noise to sample with, and the runner
refuses full batches (``minibatch_noise``).

The iterates are samples (``injects_noise`` is left True: the runner collects them), although the
kernel injects no noise of its own; it is approximate, exact only for a Gaussian posterior with
constant gradient noise and in the small-step limit.
"""

from __future__ import annotations

import torch
from torch import Tensor

from bdl.closures import Closure
from bdl.samplers.base import Declaration, Sampler, SamplerState
from bdl.samplers.gradient_noise import observing

PRECONDITIONERS = ("scalar", "diagonal")


class ConstantSGD(Sampler):
    """Constant SGD with Mandt et al.'s optimal step (``scalar``) or diagonal preconditioner."""

    declaration = Declaration(step_unit="per datum", minibatch_noise=True)

    def __init__(
        self,
        lr: float,
        preconditioner: str = "scalar",
        variance_floor: float = 1e-3,
        *,
        foreach: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        if preconditioner not in PRECONDITIONERS:
            raise ValueError(
                f"sampler.preconditioner must be one of {PRECONDITIONERS}, got {preconditioner!r}"
            )
        if not 0 < variance_floor <= 1:
            raise ValueError(f"sampler.variance_floor must be in (0, 1], got {variance_floor}")
        self.preconditioner = preconditioner
        self.variance_floor = variance_floor

    def closure_for(self, state: SamplerState, closure: Closure) -> Closure:
        if self.tuning:
            return observing(state, closure, self.foreach)
        if "preconditioner" not in state.buffers:  # the first step after burn-in
            self._fit(state)
        return closure

    def divergence_fix(self, state: SamplerState) -> str:
        if "preconditioner" not in state.buffers:
            return super().divergence_fix(state)
        if self.preconditioner == "scalar":
            steps = f"2D/ΣV = {state.info['step_size'].item():.3g} on U"
        else:
            steps = "2/V_k per coordinate"
        return (
            f"Its step after burn-in is Mandt et al.'s optimum ({steps}), which sampler.lr "
            "does not set, and it is past the stability limit 2/λ_max of this posterior's "
            "curvature: constant SGD samples only posteriors close to an isotropic Gaussian "
            "(scripts/csgd_stability.py measures it). Choose another sampler (sgld, sghmc)"
        )

    @torch.no_grad()
    def _fit(self, state: SamplerState) -> None:
        """Fix the steps from the burn-in estimate, stored relative to ``lr`` so that the
        update is ``θ ← θ − lr·lr_scale·P ⊙ ∇Ũ`` in both phases."""
        if "grad_var" not in state.buffers:
            raise ValueError(
                "csgd estimates the gradient noise during burn-in: set burn_in ≥ 1 epoch"
            )
        variances = state.buffers["grad_var"]
        total = sum(v.sum() for v in variances).item()
        dim = sum(v.numel() for v in variances)
        if not total > 0:
            raise ValueError(
                "csgd found no gradient noise during burn-in: it needs minibatch gradients "
                "(batch_size < number of training points)"
            )
        if self.preconditioner == "scalar":
            step = 2 * dim / total
            state.buffers["preconditioner"] = [
                torch.full_like(v, step / self.lr) for v in variances
            ]
        else:
            floor = self.variance_floor * total / dim
            state.buffers["preconditioner"] = [
                v.clamp(min=floor).reciprocal_().mul_(2 / self.lr) for v in variances
            ]
        state.info["step_size"] = torch.tensor(2 * dim / total)

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        if "preconditioner" in state.buffers:
            torch._foreach_addcmul_(
                state.params, state.buffers["preconditioner"], grads, value=-step_size
            )
        else:
            torch._foreach_add_(state.params, grads, alpha=-step_size)

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        scales = state.buffers.get("preconditioner", [None] * len(grads))
        for theta, g, scale in zip(state.params, grads, scales, strict=True):
            if scale is None:
                theta.add_(g, alpha=-step_size)
            else:
                theta.addcmul_(scale, g, value=-step_size)
