r"""Variational expectations of the potential: the negative evidence lower bound of a mean-field
Gaussian ``q`` (Bayes by Backprop, ``sampler=bbb``; Blundell et al. 2015).

Called with a mean-field Gaussian ``q`` (`MeanField`), the potential's minibatch closure
(`bdl.potential.Potential.closure`) returns a Monte Carlo estimate of the negative evidence
lower bound instead of ``U``, with its gradient in ``q``'s means and standard deviations (Bühler,
eqs. 3-9), which ``q`` computes (`MeanField.negative_elbo`):

$$
\mathcal{F}(q) = \frac{1}{T}\mathbb{E}_q\Big[-\frac{N}{n}\sum_{i\in\mathcal{B}}
    \log p(y_i\mid x_i,\theta) - \kappa\log p(\theta)\Big] - \kappa\,\mathbb{H}[q],
$$

which at $T = 1$ is the minibatch's share of $\mathrm{KL}[q\,\|\,p] -
\mathbb{E}_q\log p(\mathcal{D}\mid\theta)$ (eq. 4) and at other $T$ the KL to the
tempered posterior; $\kappa$ is the minibatch's prior weight (`bdl.potential`). The
scaling by $N/n$, $\kappa$ and $T$ is the potential's
(`bdl.potential.Potential.energy`, `bdl.potential.Potential.prior_scale`). The prior's
expectation is in closed form when the prior is Gaussian given its hyperparameters
(`bdl.priors.Prior.gaussian_std`), else estimated with the same draw. The likelihood's
expectation is estimated by the reparameterisation trick, $\theta = \mu +
\sigma\odot\epsilon$ (eq. 7), and for the weights of linear layers by the *local*
reparameterisation trick (Kingma, Salimans & Welling 2015): a linear map of an input $x$
under $q$ is Gaussian,

$$
x W^\top + b \sim \mathcal{N}\big(x\mu_W^\top + \mu_b,\ x^2 (\sigma_W^2)^\top +
\sigma_b^2\big),
$$

so its pre-activations are sampled directly, independently per example: the same expectation
with much less variance. It trades a draw per weight for batch × width draws and a second
matrix product per layer (the variance's, forward and backward), so a step costs about twice the
matrix products of a weight draw's (``scripts/bench_bbb.py``). It assumes that each linear module
is applied once per forward pass, as in an MLP. The stochastic forward pass runs the potential's
model, likelihood and prior; the sampler (`bdl.samplers.bbb`) only owns ``q``'s
parametrisation and update.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bdl.closures import Evaluation, writable_gradients
from bdl.noise import StandardNormal
from bdl.numerics import Buffer
from bdl.potential import Potential


@dataclass
class MeanField:
    r"""A mean-field Gaussian $q(\theta) = \prod_j \mathcal{N}(\theta_j;\mu_j,\sigma_j^2)$
    over a potential's parameters, one ``mean`` and ``std`` tensor per entry of
    ``Potential.params``.

    Attributes:
        generator: the source of the reparameterisation noise.
        local_reparam: sample the pre-activations of linear layers rather than their weights.
        analytic_kl: take the prior's expectation in closed form where it exists (``False``: always
            by Monte Carlo, for tests and comparisons).
        normal: the buffer the weight draws are drawn into; a sampler passes the same one at every
            step (`bdl.noise.StandardNormal`: a fresh one costs page faults).
        scratch: memory shaped like ``std`` for the intermediate values (the variances of the
            local reparameterisation, then the entropy's logarithms); a sampler passes the same
            one at every step, as ``normal``.
        gradients: memory for the gradients in the locally reparameterised weights' ``std``,
            which each evaluation then overwrites (None: fresh memory); a sampler that keeps no
            gradient past the next evaluation passes the same one at every step.
    """

    mean: list[Tensor]
    std: list[Tensor]
    generator: torch.Generator | None = None
    local_reparam: bool = True
    analytic_kl: bool = True
    normal: StandardNormal = field(default_factory=StandardNormal, repr=False, compare=False)
    scratch: Buffer = field(default_factory=Buffer, repr=False, compare=False)
    gradients: Buffer | None = field(default=None, repr=False, compare=False)

    def negative_elbo(
        self, potential: Potential, x: Tensor, y: Tensor, prior_weight: float
    ) -> Evaluation:
        """$\\mathcal{F}(q)$ on the minibatch ``(x, y)`` of ``potential``'s training set with
        prior weight ``prior_weight`` (module docstring), with its gradient: those in ``mean``
        followed by those in ``std``."""
        # The likelihood goes through autograd; the prior term (in closed form, or by Monte Carlo
        # from the prior's own gradient) and the entropy have gradients simple enough to add
        # directly, which saves several passes over every weight per step (the cost that matters
        # next to the matrix products).
        kappa = prior_weight
        mean = [m.detach().requires_grad_() for m in self.mean]
        std = [s.detach().requires_grad_() for s in self.std]
        local = _linear_layers(potential) if self.local_reparam else {}
        covered = {i for indices in local.values() for i in indices if i is not None}
        prior_stds = potential.prior_stds() if kappa and self.analytic_kl else None
        monte_carlo_prior = bool(kappa) and prior_stds is None
        # σ² of the locally reparameterised weights, all written before the forward pass saves any
        # (views of one buffer share a version counter, which autograd checks)
        scratch = self.scratch.like(std)
        variances = {
            weight: torch.mul(std[weight].detach(), std[weight].detach(), out=scratch[weight])
            for weight, _ in local.values()
        }
        std_grads = (
            dict(zip(variances, self.gradients.like([std[i] for i in variances]), strict=True))
            if self.gradients is not None
            else {}
        )
        with torch.enable_grad():
            # One draw serves the likelihood's sampled weights and, for a Monte Carlo prior term,
            # the weights the local reparameterisation leaves undrawn.
            drawn = [i for i in range(len(mean)) if i not in covered or monte_carlo_prior]
            theta, noise = self._draw(mean, std, drawn, covered)
            values = {
                name: mean[i] if i in covered else theta[i]
                for i, name in enumerate(potential.param_names)
            }
            hooks = [
                module.register_forward_hook(
                    _noise_hook(
                        std, weight, bias, self.generator, variances[weight], std_grads.get(weight)
                    )
                )
                for module, (weight, bias) in local.items()
            ]
            try:
                log_lik, log_prior_phi = potential.log_joint(values, x, y)
            finally:
                for hook in hooks:
                    hook.remove()
            objective = potential.energy(log_lik, [log_prior_phi], x.shape[0], kappa)
            grads = writable_gradients(
                torch.autograd.grad(objective, mean + std, materialize_grads=True)
            )
        value = objective.detach()
        if kappa:
            grad_mean, grad_std = grads[: len(mean)], grads[len(mean) :]
            scale = potential.prior_scale(kappa)
            if prior_stds is None:
                # the weights only the prior term needs, drawn into memory the pass has done with
                for i in covered:
                    mu, sigma = mean[i].detach(), std[i].detach()
                    theta[i] = torch.addcmul(mu, sigma, noise[i], out=scratch[i])
                value = value - scale * _monte_carlo_log_prior(
                    potential, theta, noise, grad_mean, grad_std, scale
                )
            else:
                model_size = len(prior_stds)
                value = value + scale * _gaussian_cross_entropy(
                    mean[:model_size], std[:model_size], prior_stds, grad_mean, grad_std, scale
                )
            value = value - kappa * _entropy(std, grad_std, kappa, scratch)
        return value, grads

    def _draw(
        self, mean: list[Tensor], std: list[Tensor], indices: list[int], covered: set[int]
    ) -> tuple[list[Tensor | None], list[Tensor | None]]:
        """ε at ``indices`` and θ = μ + σ ⊙ ε at those not ``covered`` by the local
        reparameterisation (None elsewhere)."""
        theta: list[Tensor | None] = [None] * len(mean)
        noise: list[Tensor | None] = [None] * len(mean)
        if not indices:
            return theta, noise
        draws = self.normal.like([mean[i] for i in indices], self.generator)
        for i, eps in zip(indices, draws, strict=True):
            noise[i] = eps
            if i not in covered:
                theta[i] = torch.addcmul(mean[i], std[i], eps)
        return theta, noise


def _linear_layers(potential: Potential) -> dict[nn.Linear, tuple[int, int | None]]:
    """Indices into ``potential.params`` of each linear layer's weight and bias (None without
    bias)."""
    index = {name: i for i, name in enumerate(potential.param_names)}
    layers = {}
    for prefix, module in potential.model.named_modules():
        if isinstance(module, nn.Linear):
            stem = f"model.{prefix}." if prefix else "model."
            weight = index.get(stem + "weight")
            bias = index.get(stem + "bias") if module.bias is not None else None
            if weight is not None and (module.bias is None or bias is not None):
                layers[module] = (weight, bias)
    return layers


def _noise_hook(
    std: list[Tensor],
    weight: int,
    bias: int | None,
    generator,
    variance: Tensor,
    grad_std: Tensor | None,
):
    """A forward hook adding the local reparameterisation's noise to a linear layer's output,
    which the module itself computes at the means; ``variance`` is the weights' σ², ``grad_std``
    memory for the gradient in their σ (None: fresh)."""

    def hook(module: nn.Module, args: tuple[Tensor, ...], output: Tensor) -> Tensor:
        noise = torch.randn(
            output.shape, generator=generator, device=output.device, dtype=output.dtype
        )
        std_bias = None if bias is None else std[bias]
        local_noise = _LocalNoise.apply(args[0], std[weight], std_bias, noise, variance, grad_std)
        return output + local_noise

    return hook


class _LocalNoise(torch.autograd.Function):
    r"""$\sqrt{x^2 (\sigma_W^2)^\top + \sigma_b^2}\odot\zeta$, the zero-mean part of a linear
    layer's output under $q$ (local reparameterisation), with its backward written out:
    with $\delta$ the variance and $h = g\odot\zeta/\sqrt{\delta}$ (twice
    $\partial L/\partial\delta$),

    $$
    \frac{\partial L}{\partial x} = x\odot(h\,\sigma_W^2), \qquad
    \frac{\partial L}{\partial\sigma_W} = \sigma_W\odot(h^\top x^2), \qquad
    \frac{\partial L}{\partial\sigma_b} = \sigma_b\odot\textstyle\sum_n h_n.
    $$

    Autograd would take the same products but several more passes over every weight, to square
    $\sigma$ and to carry $\partial\sigma^2/\partial\sigma = 2\sigma$ separately.
    """

    @staticmethod
    def forward(
        ctx,
        x: Tensor,
        std_weight: Tensor,
        std_bias: Tensor | None,
        noise: Tensor,
        var_weight: Tensor | None = None,
        grad_std_weight: Tensor | None = None,
    ) -> Tensor:
        """``var_weight``: $\\sigma_W^2$ where the caller has it; ``grad_std_weight``:
        memory for the gradient in $\\sigma_W$ (None: fresh)."""
        x2 = x.square()
        var_weight = std_weight.square() if var_weight is None else var_weight
        # kept out of save_for_backward: it is written, not read, and autograd's version check
        # would trip on the writes of other layers' gradients into the same buffer
        ctx.grad_std_weight = grad_std_weight
        variance = F.linear(x2, var_weight, None if std_bias is None else std_bias.square())
        # clamp: a zero variance (an all-zero input and no bias) would have an infinite slope
        scale = variance.clamp_min_(torch.finfo(variance.dtype).tiny).sqrt_()
        ctx.save_for_backward(x, x2, var_weight, std_weight, std_bias, noise, scale)
        return scale * noise

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, x2, var_weight, std_weight, std_bias, noise, scale = ctx.saved_tensors
        h = grad * noise / scale
        grad_x = x * (h @ var_weight) if ctx.needs_input_grad[0] else None
        grad_std_weight = torch.mm(h.t(), x2, out=ctx.grad_std_weight).mul_(std_weight)
        grad_std_bias = None if std_bias is None else h.sum(0).mul_(std_bias)
        return grad_x, grad_std_weight, grad_std_bias, None, None, None


@torch.no_grad()
def _monte_carlo_log_prior(
    potential: Potential,
    theta: list[Tensor],
    noise: list[Tensor],
    grad_mean: list[Tensor],
    grad_std: list[Tensor],
    scale: float,
) -> Tensor:
    r"""$\log p(\theta)$ at the draw $\theta = \mu + \sigma\odot\epsilon$ of the model's
    parameters; subtracts ``scale`` times its gradient, $g = \partial\log p/\partial\theta$
    in $\mu$ and $g\odot\epsilon$ in $\sigma$, from ``grad_mean`` and
    ``grad_std``."""
    draws = [t.detach() for t in theta[: len(potential.model_params)]]
    # the gradient takes the draw's memory, which nothing reads after it
    log_prior, prior_grads = potential.prior.log_prob_grad(
        dict(zip(potential.model_params, draws, strict=True)), out=draws
    )
    for g, g_mean, g_std, eps in zip(prior_grads, grad_mean, grad_std, noise, strict=False):
        g_mean.sub_(g, alpha=scale)
        g_std.addcmul_(g, eps, value=-scale)
    return log_prior


@torch.no_grad()
def _gaussian_cross_entropy(
    mean: list[Tensor],
    std: list[Tensor],
    prior_stds: list[Tensor | float],
    grad_mean: list[Tensor],
    grad_std: list[Tensor],
    scale: float,
) -> Tensor:
    r"""$\mathbb{E}_q[-\log p(\theta)] = \sum_j \tfrac12\log 2\pi s_j^2 + (\mu_j^2 +
    \sigma_j^2)/2s_j^2$ for the prior $\mathcal{N}(0, s_j^2)$; adds ``scale`` times its
    gradient ($\mu_j/s_j^2$, $\sigma_j/s_j^2$) to ``grad_mean`` and ``grad_std``."""
    total = torch.zeros((), dtype=torch.float64, device=mean[0].device)
    norms = zip(torch._foreach_norm(mean), torch._foreach_norm(std), strict=True)
    for m, s, prior_std, g_m, g_s, (norm_m, norm_s) in zip(
        mean, std, prior_stds, grad_mean, grad_std, norms, strict=False
    ):
        if isinstance(prior_std, Tensor):
            precision = prior_std.to(m.dtype).pow(-2)
            total += 0.5 * (precision * (m.square() + s.square())).sum()
            total -= 0.5 * (m.numel() // precision.numel()) * precision.log().sum()
            g_m.addcmul_(m, precision, value=scale)
            g_s.addcmul_(s, precision, value=scale)
        else:
            precision = prior_std**-2
            total += 0.5 * precision * (norm_m.square() + norm_s.square())
            total -= 0.5 * m.numel() * math.log(precision)
            g_m.add_(m, alpha=scale * precision)
            g_s.add_(s, alpha=scale * precision)
    size = sum(m.numel() for m in mean)
    return total + 0.5 * size * math.log(2 * math.pi)


@torch.no_grad()
def _entropy(
    std: list[Tensor], grad_std: list[Tensor], scale: float, scratch: list[Tensor]
) -> Tensor:
    r"""$\mathbb{H}[q] = \sum_j \log\sigma_j + \tfrac12\log 2\pi e$, the logarithms taken
    in ``scratch``; subtracts ``scale`` times its gradient $1/\sigma_j$ from
    ``grad_std``."""
    one = torch.ones((), dtype=std[0].dtype, device=std[0].device)
    total = torch.zeros((), dtype=torch.float64, device=std[0].device)
    for s, g, log in zip(std, grad_std, scratch, strict=True):
        total += torch.log(s, out=log).sum()
        g.addcdiv_(one, s, value=-scale)
    size = sum(s.numel() for s in std)
    return total + 0.5 * size * math.log(2 * math.pi * math.e)
