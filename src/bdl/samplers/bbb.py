r"""Bayes by Backprop (Blundell, Cornebise, Kavukcuoglu & Wierstra, ICML 2015; Bühler §2.2).

Variational inference with a mean-field Gaussian $q(w\mid\theta)$, $\theta = (\mu,
\rho)$, fitted by stochastic gradient descent on the variational free energy (eqs. 3-4)

$$
\mathcal{F}(\mathcal{D}, \theta) = \mathrm{KL}\big[q(w\mid\theta)\,\|\,P(w)\big]
    - \mathbb{E}_{q(w\mid\theta)}\big[\log P(\mathcal{D}\mid w)\big],
$$

with unbiased Monte Carlo gradients through the reparameterisation (eqs. 6-9)

$$
\begin{aligned}
\sigma &= \log(1 + e^{\rho}), \qquad w = \mu + \sigma\circ\epsilon,
    \quad \epsilon \sim \mathcal{N}(0, I) \\
\Delta_\mu &= \frac{\partial f(w,\theta)}{\partial w}
    + \frac{\partial f(w,\theta)}{\partial\mu}, \qquad
\Delta_\rho = \frac{\partial f(w,\theta)}{\partial w}\,\frac{\epsilon}{1 + e^{-\rho}}
    + \frac{\partial f(w,\theta)}{\partial\rho} \\
\mu &\leftarrow \mu - \alpha\,\Delta_\mu, \qquad \rho \leftarrow \rho - \alpha\,\Delta_\rho
    \qquad (10)
\end{aligned}
$$

where $f(w, \theta) = \log q(w\mid\theta) - \log P(w)P(\mathcal{D}\mid w)$. The estimate of
$\mathcal{F}$ and its gradient in $(\mu, \sigma)$ come from the potential's
variational closure (`bdl.variational`): minibatch likelihood scaled by
$N/n$, KL in closed form when the prior is Gaussian (given its hyperparameters) and by Monte
Carlo otherwise (Blundell's scale mixture), the local reparameterisation trick on linear layers
(``local_reparam``); this class owns the rest: $\sigma = \log(1 + e^\rho)$ and its chain rule
$\partial\sigma/\partial\rho = 1/(1 + e^{-\rho})$, ``num_mc`` samples per step (eq. 5's sum),
the KL weight per minibatch and the update (10). `BBB` takes the update by Adam (Kingma &
Ba 2015) — the practice of reimplementations and of Izmailov et al. (2021)'s MFVI — so its ``lr``
is Adam's $\alpha$ on $(\mu, \rho)$, not a rate per datum; `BBBSGD` takes
the paper's plain SGD step, at a rate per datum.

**KL weighting** (Blundell §3.4). The minibatch cost $\mathcal{F}_i = \pi_i\,\mathrm{KL} -
\mathbb{E}_q\log P(\mathcal{D}_i\mid w)$ sums to $\mathcal{F}$ over the $M$ minibatches
of an epoch for any $\sum_i\pi_i = 1$: ``uniform`` takes $\pi_i = 1/M$ (the
default), ``blundell`` $\pi_i = 2^{M-i}/(2^M - 1)$, which lets the prior shape the first
minibatches of each epoch and the data the rest. Blundell et al. took plain SGD steps, which keep
the KL's full weight; Adam divides every step by a running gradient scale, so that under
``blundell`` the prior's few large gradients of an epoch move $\rho$ about as far as any
other step and its pull on $\sigma$ is all but lost. Measured on MNIST (784-400-400-10,
scale-mixture prior, $\sigma_0 = 0.01$, 5 epochs): under ``blundell`` every $\sigma$
stayed within 0.0087-0.0127, so $|\mu|/\sigma$ ranked the weights by $|\mu|$ and
removing 95% of them raised the test error from 1.8% to 9.0%; under ``uniform`` $\sigma$
spread over 0.003-0.16 and 95% removed left the error unchanged (2.3%).

**Samples.** ``μ`` is the network's own weights (``state.params``) during training, so the net
between steps is $q$'s mean; `BBB.final_samples` writes ``num_samples`` draws
$w \sim q$ into them, which the runner stores, averages and scores exactly as an MCMC chain's
samples, and then restores $\mu$.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch.optim.adam import adam

from bdl.closures import VariationalClosure
from bdl.noise import StandardNormal
from bdl.numerics import Buffer, softplus
from bdl.samplers.base import Declaration, Sampler, SamplerState
from bdl.variational import MeanField

KL_WEIGHTINGS = ("uniform", "blundell")
ADAM_EPS = 1e-8
NEGLIGIBLE_WEIGHT = 1e-30


class BBB(Sampler):
    """Bayes by Backprop with Adam step size ``lr`` ($\\alpha$).

    Args:
        lr: Adam's step size $\\alpha$ on $(\\mu, \\rho)$.
        betas: Adam's moment decays $(\\beta_1, \\beta_2)$.
        num_mc: Monte Carlo samples per step (the $n$ of eq. 5).
        kl_weighting: ``uniform`` or ``blundell`` (module docstring).
        local_reparam: sample linear layers' pre-activations (Kingma et al. 2015) instead of
            their weights.
        init_std: the initial $\\sigma$, the same for every weight ($\\mu$ starts at the
            network's initialisation, or at ``init_from``'s solution).
        num_samples: draws from $q$ kept after training.
    """

    declaration = Declaration(step_unit="optimiser", injects_noise=False)

    def __init__(
        self,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        num_mc: int = 1,
        kl_weighting: str = "uniform",
        local_reparam: bool = True,
        init_std: float = 0.01,
        num_samples: int = 20,
        *,
        foreach: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(lr, foreach=foreach, generator=generator)
        beta1, beta2 = betas
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
            raise ValueError(f"sampler.betas must both be in [0, 1), got {list(betas)}")
        if num_mc < 1:
            raise ValueError(f"sampler.num_mc must be at least 1, got {num_mc}")
        if kl_weighting not in KL_WEIGHTINGS:
            raise ValueError(
                f"sampler.kl_weighting must be one of {', '.join(KL_WEIGHTINGS)}, got "
                f"{kl_weighting!r}"
            )
        if not 0 < init_std < math.inf:
            raise ValueError(f"sampler.init_std must be positive and finite, got {init_std}")
        if num_samples < 1:
            raise ValueError(f"sampler.num_samples must be at least 1, got {num_samples}")
        self.betas = (beta1, beta2)
        self.num_mc = num_mc
        self.kl_weighting = kl_weighting
        self.local_reparam = local_reparam
        self.init_std = init_std
        self.num_samples = num_samples
        self._weight_draws = StandardNormal()  # q's, one buffer for every step
        # σ and ∂σ/∂ρ at each step, in memory kept from step to step
        self._std, self._std_slope, self._scratch = Buffer(), Buffer(), Buffer()
        # the closure's gradients in σ, except where a step sums several draws' gradients
        self._std_grads = Buffer() if num_mc == 1 else None

    def init(self, params: list[Tensor]) -> SamplerState:
        state = super().init(params)
        rho = math.log(math.expm1(self.init_std))  # the inverse of σ = log(1 + e^ρ)
        state.buffers["mu"] = state.params
        state.buffers["rho"] = [torch.full_like(p, rho) for p in params]
        for key in ("exp_avg", "exp_avg_sq"):
            state.buffers[key] = [torch.zeros_like(p) for p in params + params]
        return state

    def prior_weight(self, batch: int, num_batches: int) -> float:
        """$M\\pi_i$ for minibatch ``i = batch + 1`` of ``M = num_batches``.

        Blundell's weights halve from one minibatch to the next; below ``NEGLIGIBLE_WEIGHT`` the
        term could not change a float32 gradient and is returned as 0, which lets the potential
        skip the KL's cost on most of an epoch's minibatches (from the ~100th on).
        """
        if self.kl_weighting == "uniform":
            return 1.0
        # 2^(M-i) / (2^M - 1) without forming 2^M, which overflows a float beyond M = 1023
        pi = math.ldexp(1.0, -(batch + 1)) / -math.expm1(-num_batches * math.log(2))
        weight = num_batches * pi
        return weight if weight >= NEGLIGIBLE_WEIGHT else 0.0

    @staticmethod
    def std(rho: list[Tensor]) -> list[Tensor]:
        """$\\sigma = \\log(1 + e^\\rho)$."""
        return [softplus(r) for r in rho]

    @torch.no_grad()
    def step(
        self,
        state: SamplerState,
        closure: VariationalClosure[MeanField],
        lr_scale: float = 1.0,
        noise: bool = True,
        tune: bool = False,
    ) -> SamplerState:
        rho = state.buffers["rho"]
        std, slope = self._std.like(rho), self._std_slope.like(rho)
        for r, s, ds in zip(rho, std, slope, strict=True):
            softplus(r, out=s, scratch=ds)
            torch.sigmoid(r, out=ds)  # ∂σ/∂ρ = 1 / (1 + e^-ρ), for the chain rule
        q = MeanField(
            state.params,
            std,
            self.generator,
            self.local_reparam,
            normal=self._weight_draws,
            scratch=self._scratch,
            gradients=self._std_grads,
        )
        value, grads = closure(q)
        for _ in range(self.num_mc - 1):
            more_value, more_grads = closure(q)
            value = value + more_value
            torch._foreach_add_(grads, more_grads)
        if self.num_mc > 1:
            value = value / self.num_mc
            torch._foreach_div_(grads, self.num_mc)
        torch._foreach_mul_(grads[len(rho) :], slope)  # now in ρ
        update = self._update_foreach if self.foreach else self._update_loop
        update(state, grads, self.step_size(lr_scale), noise)
        state.step += 1
        state.grad_evals += self.num_mc
        state.info["potential"] = value
        return state

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        # PyTorch's fused Adam (its public functional form): one pass over (μ, ρ) where the
        # foreach ops take seven, which next to the matrix products of a step is what the
        # variational update costs. It counts each tensor's step itself, from this one.
        theta = state.buffers["mu"] + state.buffers["rho"]
        beta1, beta2 = self.betas
        steps = [torch.tensor(float(state.step), device=t.device) for t in theta]
        adam(
            theta,
            grads,
            state.buffers["exp_avg"],
            state.buffers["exp_avg_sq"],
            [],
            steps,
            fused=True,
            lr=step_size,
            beta1=beta1,
            beta2=beta2,
            weight_decay=0.0,
            eps=ADAM_EPS,
            amsgrad=False,
            maximize=False,
        )

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        theta = state.buffers["mu"] + state.buffers["rho"]
        m, v = state.buffers["exp_avg"], state.buffers["exp_avg_sq"]
        beta1, beta2 = self.betas
        step = state.step + 1
        alpha, correction = step_size / (1 - beta1**step), math.sqrt(1 - beta2**step)
        for t, g, m_i, v_i in zip(theta, grads, m, v, strict=True):
            m_i.lerp_(g, 1 - beta1)
            v_i.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            t.addcdiv_(m_i, v_i.sqrt().div_(correction).add_(ADAM_EPS), value=-alpha)

    def posterior_moments(self, state: SamplerState) -> tuple[list[Tensor], list[Tensor]]:
        return [m.detach().clone() for m in state.params], self.std(state.buffers["rho"])

    @torch.no_grad()
    def final_samples(self, state: SamplerState) -> Iterator[None]:
        mu, sigma = self.posterior_moments(state)
        try:
            for _ in range(self.num_samples):
                draws = torch._foreach_addcmul(mu, sigma, self.gaussian_like(mu))
                torch._foreach_copy_(state.params, draws)
                yield
        finally:
            torch._foreach_copy_(state.params, mu)


class BBBSGD(BBB):
    r"""Bayes by Backprop with Blundell et al.'s own update: plain SGD steps (10) on
    $(\mu, \rho)$, with their KL weighting by default.

    ``lr`` is per datum, like the SG-MCMC samplers': the runner makes it a step of ``lr / N`` on the
    estimate of $\mathcal{F}$ (`bdl.potential.Potential.step_size`), which is
    $M = N/n$ times the paper's minibatch cost $\mathcal{F}_i$ (the likelihood summed
    over the $n$ points), so the paper's rate $\alpha$ is ``lr`` $= \alpha n$:
    their $\alpha = 10^{-3}$ at $n = 128$ is 0.128. Without Adam's rescaling the
    KL's pull on $\sigma$ is as large as its gradient, and at a small $\sigma$ that
    is small: the entropy's $-\partial\log\sigma/\partial\rho \approx -1$ moves
    $\rho$ by about $\alpha$ an epoch (the KL weights of an epoch sum to one).
    """

    declaration = Declaration(step_unit="per datum", injects_noise=False)

    def __init__(
        self,
        lr: float,
        num_mc: int = 1,
        kl_weighting: str = "blundell",
        local_reparam: bool = True,
        init_std: float = 0.01,
        num_samples: int = 20,
        *,
        foreach: bool = True,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__(
            lr,
            num_mc=num_mc,
            kl_weighting=kl_weighting,
            local_reparam=local_reparam,
            init_std=init_std,
            num_samples=num_samples,
            foreach=foreach,
            generator=generator,
        )

    def init(self, params: list[Tensor]) -> SamplerState:
        state = super().init(params)
        del state.buffers["exp_avg"], state.buffers["exp_avg_sq"]  # Adam's, not SGD's
        return state

    def _update_foreach(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        torch._foreach_add_(state.buffers["mu"] + state.buffers["rho"], grads, alpha=-step_size)

    def _update_loop(
        self, state: SamplerState, grads: list[Tensor], step_size: float, noise: bool
    ) -> None:
        for theta, grad in zip(state.buffers["mu"] + state.buffers["rho"], grads, strict=True):
            theta.add_(grad, alpha=-step_size)
