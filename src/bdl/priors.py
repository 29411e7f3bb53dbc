r"""Priors $p(\theta)$ over a network's named parameters.

A prior maps parameter names (``"layers.0.weight"``) to tensors and returns ``log_prob(params)``;
autograd through `bdl.potential.Potential` supplies its gradient, so a new prior is one
method. Nalisnick's lectures ("Bayesian deep learning: priors") lay out the families written here:

- **per weight, per layer** — `Gaussian`, `Laplace`, `StudentT` and
  `ScaleMixture` are i.i.d. over the elements of a tensor, with a scale that may differ per
  layer (``layers``, fnmatch patterns on parameter names) and may shrink with the layer's fan-in
  $H$ (``fan_in``: $\sigma^2/H$, Neal's scaling under which a wide network tends to a
  Gaussian process);
- **hierarchical** — `GammaHierarchical` puts a Gamma hyperprior on the precision of each
  parameter tensor and `ARD` on the precision of each input unit (MacKay's automatic
  relevance determination). Their precisions are state of the prior, on the run's device, resampled
  by the conjugate Gibbs step of Neal 1996 (`Prior.gibbs_step`) between the sampler's updates.

Priors whose parameters are, given their hyperparameters, Gaussian say so through
`Prior.gaussian_std`, which lets the potential differentiate them in closed form
($-\theta/\sigma^2$, no autograd graph at every step) and variational methods use the
closed-form KL divergence.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fnmatch import fnmatch

import torch
from torch import Tensor

from bdl.numerics import softplus

__all__ = [
    "ARD",
    "conjugate_precision",
    "ElementwisePrior",
    "Gaussian",
    "GammaHierarchical",
    "Laplace",
    "Prior",
    "ScaleMixture",
    "StudentT",
]


def conjugate_precision(
    alpha: float,
    beta: float,
    count: int,
    squares: Tensor,
    temperature: float,
    generator: torch.Generator,
    like: Tensor,
) -> Tensor:
    r"""A draw of a Gaussian precision $\lambda$ from its conjugate conditional under a
    $\mathrm{Gamma}(\alpha, \beta)$ prior, given ``count`` values with sum of squares
    ``squares`` (Neal 1996): $\mathrm{Gamma}(\alpha + n/2,\ \beta + \sum x^2/2)$, or at
    temperature $T$, for the joint density to the power $1/T$, shape
    $(\alpha - 1 + n/2)/T + 1$ and rate $(\beta + \sum x^2/2)/T$. The Gamma variates
    are drawn in ``like``'s shape and dtype."""
    concentration = torch.full_like(like, (alpha - 1 + 0.5 * count) / temperature + 1)
    rate = (beta + 0.5 * squares) / temperature
    return torch._standard_gamma(concentration, generator=generator) / rate


#: Elements per part of `ElementwisePrior.log_prob_grad` (a megabyte in float32)
ELEMENTWISE_CHUNK = 2**18

#: Where the logistic function is 0 or 1 to within 2e-35 (``exp(-80)``)
SIGMOID_SATURATION = 80.0


def _value_and_grad(
    function: Callable[..., Tensor], tensors: list[Tensor]
) -> tuple[Tensor, list[Tensor]]:
    """``function(*tensors)`` and its gradient in ``tensors``, both detached."""
    with torch.enable_grad():
        leaves = [t.detach().requires_grad_() for t in tensors]
        value = function(*leaves)
        grads = torch.autograd.grad(value, leaves, materialize_grads=True)
    return value.detach(), list(grads)


class Prior:
    """Base class: ``log_prob`` of a dict of named parameters, up to an additive constant.

    The hooks below default to a prior without hyperparameters: nothing to bind, resample or trace.
    """

    def bind(self, params: Mapping[str, Tensor]) -> None:
        """Meet the model's named parameters once, before the first ``log_prob``: resolve per-layer
        settings, check they name real parameters, and allocate hyperparameter state on their
        device."""

    #: whether `chain_log_prob` is implemented (chains stepped as one, `bdl.runner.steppers`)
    vectorisable = False

    def log_prob(self, params: Mapping[str, Tensor]) -> Tensor:
        raise NotImplementedError

    def log_prob_grad(
        self, params: Mapping[str, Tensor], out: list[Tensor] | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        """``log_prob(params)`` and its gradient in each of ``params``' tensors (in their order),
        outside any autograd graph: by autograd here, in closed form where a prior writes it.
        ``out``: memory for the gradients (None: fresh), which may be ``params``' own."""
        names = list(params)
        value, grads = _value_and_grad(
            lambda *tensors: self.log_prob(dict(zip(names, tensors, strict=True))),
            list(params.values()),
        )
        if out is not None:
            grads = [o.copy_(g) for o, g in zip(out, grads, strict=True)]
        return value, grads

    def chain_log_prob(self, params: Mapping[str, Tensor]) -> Tensor:
        """``log_prob`` of parameters stacked along a leading chain dimension: one value per
        chain."""
        raise NotImplementedError(f"{type(self).__name__} has no chain_log_prob")

    def gibbs_step(
        self, params: Mapping[str, Tensor], generator: torch.Generator, temperature: float = 1.0
    ) -> None:
        """Resample the hyperparameters from their conditional given ``params`` (if any)."""

    def hyperparameters(self) -> dict[str, Tensor]:
        """Current hyperparameter values by trace name (the extra columns of ``curve.csv``)."""
        return {}

    def state_dict(self) -> dict[str, Tensor]:
        """The hyperparameter state a Gibbs step changes, by name, for checkpoints."""
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        """Restore `state_dict` in place."""

    def gaussian_std(self, name: str, param: Tensor) -> Tensor | float | None:
        """If ``param`` is ``N(0, σ²)`` elementwise given the hyperparameters: σ, broadcastable
        to ``param``; ``None`` otherwise."""
        return None


#: The scales a prior may have: its precision 1/s² times a weight's square, and a weight drawn
#: from it, stay float32 numbers (at most about 3.4e38) with room for the sums of a network.
SCALE_RANGE = (1e-12, 1e12)


def _check_scale_range(key: str, scale: float) -> None:
    low, high = SCALE_RANGE
    if not low <= scale <= high:
        raise ValueError(
            f"{key}={scale:g} is outside [{low:g}, {high:g}]: its precision 1/scale² "
            f"({scale**-2:.3g}) leaves float32 arithmetic (potentials of inf or 0); choose a "
            "scale in that range"
        )


class ElementwisePrior(Prior):
    r"""An i.i.d. location-scale prior $p(\theta_j) = f(\theta_j / s) / s$ on each tensor.

    Args:
        scale: the default scale $s$.
        layers: per-layer scales, ``{fnmatch pattern on the parameter name: scale}``; the first
            matching pattern wins (e.g. ``{"*.bias": 10.0, "layers.4.*": 0.1}``).
        fan_in: divide the scale of every weight tensor (two or more dimensions) by
            $\sqrt{H}$, $H$ the fan-in of its layer (input features times kernel
            size), so that the variance is $s^2/H$ (Nalisnick, "Normal prior"; Neal 1996).
            Biases keep $s$: they feed one unit whatever the width.
    """

    def __init__(
        self, scale: float = 1.0, layers: Mapping[str, float] | None = None, fan_in: bool = False
    ) -> None:
        if not 0 < scale < math.inf:
            raise ValueError(f"prior.scale must be positive and finite, got {scale}")
        _check_scale_range("prior.scale", scale)
        if layers is not None and not isinstance(layers, Mapping):
            raise ValueError(
                f"prior.layers={layers} is not a mapping of parameter-name patterns to scales: "
                "write e.g. prior.layers='{\"*.bias\": 10.0}', or null for none"
            )
        self.layers = {str(k): float(v) for k, v in (layers or {}).items()}
        for pattern, value in self.layers.items():
            if not 0 < value < math.inf:
                raise ValueError(
                    f"prior.layers[{pattern!r}] must be a positive, finite scale, got {value}"
                )
            _check_scale_range(f"prior.layers[{pattern!r}]", value)
        self.scale = scale
        self.fan_in = fan_in
        self._scales: dict[str, float] = {}

    def bind(self, params: Mapping[str, Tensor]) -> None:
        for pattern in self.layers:
            if not any(fnmatch(name, pattern) for name in params):
                raise ValueError(
                    f"prior.layers pattern {pattern!r} matches no parameter; the parameters are "
                    + ", ".join(params)
                )
        self._scales = {name: self.scale_of(name, p) for name, p in params.items()}

    def scale_of(self, name: str, param: Tensor) -> float:
        """The scale $s$ of the tensor ``name``: its layer's, over $\\sqrt{H}$."""
        if name in self._scales:
            return self._scales[name]
        scale = next((s for p, s in self.layers.items() if fnmatch(name, p)), self.scale)
        if self.fan_in and param.ndim >= 2:
            scale /= math.sqrt(math.prod(param.shape[1:]))
        return scale

    vectorisable = True

    def log_prob(self, params: Mapping[str, Tensor]) -> Tensor:
        return torch.stack(
            [self.log_density(p, self.scale_of(name, p)).sum() for name, p in params.items()]
        ).sum()

    def chain_log_prob(self, params: Mapping[str, Tensor]) -> Tensor:
        # the scales were resolved by bind() on one chain's shapes (fan_in reads them)
        return sum(
            self.log_density(p, self._scales[name]).flatten(1).sum(1) for name, p in params.items()
        )

    def log_density(self, theta: Tensor, scale: float) -> Tensor:
        """Elementwise $\\log p(\\theta_j)$ at scale ``scale``."""
        raise NotImplementedError

    def log_prob_grad(
        self, params: Mapping[str, Tensor], out: list[Tensor] | None = None
    ) -> tuple[Tensor, list[Tensor]]:
        # A tensor at a time in parts of ELEMENTWISE_CHUNK elements: the intermediate values
        # of a network's largest layers, taken whole, cost the allocator page faults at every
        # step (Bayes by Backprop's Monte Carlo KL) that took longer than the arithmetic. A part
        # is read whole before its gradient is written, so `out` may be `params`' memory.
        values, grads = [], []
        for i, (name, p) in enumerate(params.items()):
            scale = self.scale_of(name, p)
            grad = (
                torch.empty_like(p, memory_format=torch.contiguous_format)
                if out is None
                else out[i]
            )
            parts = p.reshape(-1).split(ELEMENTWISE_CHUNK)
            for part, grad_part in zip(parts, grad.view(-1).split(ELEMENTWISE_CHUNK), strict=True):
                value, part_grad = self.log_density_grad(part, scale)
                values.append(value)
                grad_part.copy_(part_grad)
            grads.append(grad)
        return torch.stack(values).sum(), grads

    def log_density_grad(self, theta: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        """$\\sum_j \\log p(\\theta_j)$ at scale ``scale`` and its gradient in ``theta``
        (by autograd unless a prior writes it out)."""
        value, (grad,) = _value_and_grad(lambda t: self.log_density(t, scale).sum(), [theta])
        return value, grad


class Gaussian(ElementwisePrior):
    r"""Gaussian $\theta_j \sim \mathcal{N}(0, \sigma^2)$, ``scale`` $= \sigma$.

    $\log p(\theta) = -\lVert\theta\rVert^2 / 2\sigma^2 - \tfrac{D}{2}\log 2\pi\sigma^2$
    per tensor (Bühler, §2.1, step 1). Its gradient $-\theta/\sigma^2$ is weight decay
    $1/\sigma^2$ on the scale of ``U`` (Ambrogioni, "MAP as weight decay").
    """

    def __init__(
        self, scale: float = 1.0, layers: Mapping[str, float] | None = None, fan_in: bool = False
    ) -> None:
        super().__init__(scale, layers, fan_in)
        self._cache: dict[tuple, tuple[Tensor, Tensor, float]] = {}

    def log_prob(self, params: Mapping[str, Tensor]) -> Tensor:
        # One fused norm over all tensors: this prior is evaluated at every step of every run.
        tensors = list(params.values())
        squared = torch.stack(torch._foreach_norm(tensors)).square()
        inverse, _, constant = self._terms(params, squared)
        return -0.5 * (squared * inverse).sum() - 0.5 * constant

    def chain_log_prob(self, params: Mapping[str, Tensor]) -> Tensor:
        # fused as log_prob: one weighted sum of squares over each chain's parameters, laid end
        # to end, instead of a few operations per tensor at every step
        flat = torch.cat([p.flatten(1) for p in params.values()], 1)
        _, inverse, constant = self._terms({name: p[0] for name, p in params.items()}, flat)
        return -0.5 * (flat.square() @ inverse) - 0.5 * constant

    def _terms(self, params: Mapping[str, Tensor], like: Tensor) -> tuple[Tensor, Tensor, float]:
        """The precisions ``1/s²`` per tensor and per element (as tensors ``like``) and the
        normalising constant, cached per layout."""
        key = (like.dtype, like.device, *((name, p.shape) for name, p in params.items()))
        if key not in self._cache:
            variances = [self.scale_of(name, p) ** 2 for name, p in params.items()]
            inverse = torch.tensor([1 / v for v in variances], dtype=like.dtype, device=like.device)
            # sizes known to the tracer, unlike repeat_interleave's: torch.compile of the
            # potential's prior term (compile=true) traces this at its first call
            elementwise = torch.cat(
                [i.expand(p.numel()) for i, p in zip(inverse, params.values(), strict=True)]
            )
            constant = sum(
                p.numel() * math.log(2 * math.pi * v)
                for p, v in zip(params.values(), variances, strict=True)
            )
            self._cache[key] = inverse, elementwise, constant
        return self._cache[key]

    def log_density(self, theta: Tensor, scale: float) -> Tensor:
        return -0.5 * (theta / scale).square() - 0.5 * math.log(2 * math.pi * scale**2)

    def gaussian_std(self, name: str, param: Tensor) -> float:
        return self.scale_of(name, param)


class Laplace(ElementwisePrior):
    r"""Laplace $p(\theta_j) = e^{-|\theta_j|/b} / 2b$, ``scale`` $= b$: the MAP is
    L1-regularised (sparse) where the Gaussian's is L2 (Nalisnick, "On Bayesian classification
    with Laplace priors")."""

    def log_density(self, theta: Tensor, scale: float) -> Tensor:
        return -theta.abs() / scale - math.log(2 * scale)


class StudentT(ElementwisePrior):
    r"""Student-t with ``df`` $= \nu$ degrees of freedom and scale $s$, heavy-tailed:

    $$
    \log p(\theta_j) = \log\frac{\Gamma(\frac{\nu+1}{2})}{\Gamma(\frac{\nu}{2})\sqrt{\nu\pi}\,s}
        - \frac{\nu+1}{2}\log\Big(1 + \frac{\theta_j^2}{\nu s^2}\Big),
    $$

    the marginal of $\theta_j \sim \mathcal{N}(0, \tau^2)$ under the inverse-Gamma hyperprior
    $\tau^2 \sim \Gamma^{-1}(\nu/2, \nu s^2/2)$ (Nalisnick, "Hierarchical priors").
    """

    def __init__(
        self,
        df: float = 3.0,
        scale: float = 1.0,
        layers: Mapping[str, float] | None = None,
        fan_in: bool = False,
    ) -> None:
        super().__init__(scale, layers, fan_in)
        if not 0 < df < math.inf:
            raise ValueError(f"prior.df (degrees of freedom) must be positive and finite, got {df}")
        self.df = df

    def log_density(self, theta: Tensor, scale: float) -> Tensor:
        nu = self.df
        normaliser = math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2)
        constant = normaliser - 0.5 * math.log(nu * math.pi * scale**2)
        return constant - 0.5 * (nu + 1) * torch.log1p((theta / scale).square() / nu)


#: The largest |-ln σ| of a scale-mixture component: σ² (times any sensible prior.scale²) stays a
#: finite, non-zero double.
MAX_LOG_WIDTH = 100


class ScaleMixture(ElementwisePrior):
    r"""Blundell et al. (2015)'s scale mixture of two Gaussians (Bühler, §2.2):

    $$
    p(\theta_j) = \pi\,\mathcal{N}(\theta_j; 0, \sigma_1^2) + (1 - \pi)\,\mathcal{N}(\theta_j;
    0, \sigma_2^2),\qquad \sigma_1 > \sigma_2,\ \sigma_2 \ll 1,
    $$

    a wide component that lets weights be large and a narrow one that pulls the rest to zero.
    Following the paper, the widths are given as ``neg_log_sigma1`` $= -\ln\sigma_1$ and
    ``neg_log_sigma2`` $= -\ln\sigma_2$ (natural logarithms; the paper searched
    $\{0, 1, 2\}$ and $\{6, 7, 8\}$, i.e. $\sigma_1 = 1$ and
    $\sigma_2 = e^{-6} \approx 0.0025$ at the defaults). ``scale`` (and ``layers``,
    ``fan_in``) multiply both widths.
    """

    def __init__(
        self,
        pi: float = 0.5,
        neg_log_sigma1: float = 0.0,
        neg_log_sigma2: float = 6.0,
        scale: float = 1.0,
        layers: Mapping[str, float] | None = None,
        fan_in: bool = False,
    ) -> None:
        super().__init__(scale, layers, fan_in)
        if not 0 < pi < 1:
            raise ValueError(f"prior.pi (the wide component's weight) must be in (0, 1), got {pi}")
        for key, value in (("neg_log_sigma1", neg_log_sigma1), ("neg_log_sigma2", neg_log_sigma2)):
            # σ = e^-value is a positive double (no overflow to inf, no underflow to 0) here
            if not -MAX_LOG_WIDTH <= value <= MAX_LOG_WIDTH:
                raise ValueError(
                    f"prior.{key}={value} is out of range: σ = e^-{key} must be a positive "
                    f"double; use a value between -{MAX_LOG_WIDTH} and {MAX_LOG_WIDTH} "
                    "(Blundell et al. 2015 searched 0 to 8)"
                )
        self.pi = pi
        self.sigma1 = math.exp(-neg_log_sigma1)
        self.sigma2 = math.exp(-neg_log_sigma2)

    def log_density(self, theta: Tensor, scale: float) -> Tensor:
        square, difference, (_, half_prec2), (_, log_c2) = self._quadratic(theta, scale)
        return softplus(difference).add_(square.mul_(-half_prec2)).add_(log_c2)

    def log_density_grad(self, theta: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        # ∂/∂θ of softplus(d) - θ²/2σ2²: the wide component's responsibility sigmoid(d) weighs
        # the two precisions
        square, difference, (half_prec1, half_prec2), (_, log_c2) = self._quadratic(theta, scale)
        value = softplus(difference).add_(square, alpha=-half_prec2).sum() + theta.numel() * log_c2
        slope = 2 * (half_prec2 - half_prec1)
        # sigmoid(±80) is 0 or 1 to within 2e-35, and the CPU's sigmoid is slower past it
        responsibility = torch.sigmoid(difference.clamp_(-SIGMOID_SATURATION, SIGMOID_SATURATION))
        grad = responsibility.mul_(slope).sub_(2 * half_prec2).mul_(theta)
        return value, grad

    def _quadratic(
        self, theta: Tensor, scale: float
    ) -> tuple[Tensor, Tensor, tuple[float, float], tuple[float, float]]:
        """θ², ``d`` with log p = log c2 N2 + softplus(d), and the components' ``1/2σ²`` and
        ``log c`` (weight times normaliser).

        ``d = log c1 N1 - log c2 N2``, a quadratic in θ, makes the log-sum-exp of the two
        components one softplus, the cheapest form to evaluate and differentiate (the Monte Carlo
        KL of Bayes by Backprop takes both on every weight at every step)."""
        (log_c1, half_prec1), (log_c2, half_prec2) = (
            (
                math.log(weight) - 0.5 * math.log(2 * math.pi * (scale * sigma) ** 2),
                0.5 / (scale * sigma) ** 2,
            )
            for weight, sigma in ((self.pi, self.sigma1), (1 - self.pi, self.sigma2))
        )
        square = theta.square()
        difference = square.mul(half_prec2 - half_prec1).add_(log_c1 - log_c2)
        return square, difference, (half_prec1, half_prec2), (log_c1, log_c2)


class GammaHierarchical(Prior):
    r"""Gaussian weights with a Gamma hyperprior on the precision of each parameter group:

    $$
    \theta_g \mid \lambda_g \sim \mathcal{N}(0, \lambda_g^{-1} I), \qquad
    \lambda_g \sim \mathrm{Gamma}(\alpha, \beta)\ \ \text{(shape, rate)},
    $$

    one group per parameter tensor, so each layer's weights and biases separately, as in Chen et
    al. (2014)'s MNIST code (``hyperupdater = 'gibbs-sep'``; Neal 1996). ``log_prob`` is
    $\log p(\theta \mid \lambda)$ at the current precisions; `gibbs_step` draws them
    from their conjugate conditional (Neal 1996)

    $$
    \lambda_g \mid \theta_g \sim \mathrm{Gamma}\big(\alpha + n_g/2,\ \beta +
    \lVert\theta_g\rVert^2/2\big),
    $$

    $n_g$ the size of the group. At temperature $T$ the target is the joint density to
    the power $1/T$, whose conditional is Gamma with shape
    $(\alpha - 1 + n_g/2)/T + 1$ and rate $(\beta + \lVert\theta_g\rVert^2/2)/T$.

    Args:
        alpha: the hyperprior's shape $\alpha$ (Chen et al.: Gamma(1, 1)).
        beta: the hyperprior's rate $\beta$.
        precision: the initial $\lambda$ (Chen et al.'s initial weight decay 2·10⁻⁵ per datum
            at N = 50 000 is $\lambda = 1$).
    """

    def __init__(self, alpha: float = 1.0, beta: float = 1.0, precision: float = 1.0) -> None:
        for key, value in (("alpha", alpha), ("beta", beta), ("precision", precision)):
            if not 0 < value < math.inf:
                raise ValueError(f"prior.{key} must be positive and finite, got {value}")
        self.alpha = alpha
        self.beta = beta
        self.initial_precision = precision
        self.precisions: dict[str, Tensor] = {}

    def group_dims(self, param: Tensor) -> tuple[int, ...]:
        """The dimensions a group extends over; one precision per index of the others."""
        return tuple(range(param.ndim))

    def bind(self, params: Mapping[str, Tensor]) -> None:
        for name, p in params.items():
            self._precision(name, p)

    def _precision(self, name: str, param: Tensor) -> Tensor:
        if name not in self.precisions:
            shape = [1 if d in self.group_dims(param) else n for d, n in enumerate(param.shape)]
            self.precisions[name] = torch.full(
                shape, self.initial_precision, dtype=param.dtype, device=param.device
            )
        return self.precisions[name]

    def _groups(self, name: str, param: Tensor) -> tuple[Tensor, int, Tensor]:
        """The precisions of ``param``'s groups, the size of a group and its sum of squares."""
        precision = self._precision(name, param)
        squares = param.square().sum(self.group_dims(param), keepdim=True)
        return precision, param.numel() // precision.numel(), squares

    def log_prob(self, params: Mapping[str, Tensor]) -> Tensor:
        total = []
        for name, p in params.items():
            precision, size, squares = self._groups(name, p)
            total.append(
                (
                    0.5 * size * (precision.log() - math.log(2 * math.pi))
                    - 0.5 * precision * squares
                ).sum()
            )
        return torch.stack(total).sum()

    @torch.no_grad()
    def gibbs_step(
        self, params: Mapping[str, Tensor], generator: torch.Generator, temperature: float = 1.0
    ) -> None:
        for name, p in params.items():
            precision, size, squares = self._groups(name, p)
            precision.copy_(
                conjugate_precision(
                    self.alpha, self.beta, size, squares, temperature, generator, like=precision
                )
            )

    def hyperparameters(self) -> dict[str, Tensor]:
        return {f"precision/{name}": lam.mean() for name, lam in self.precisions.items()}

    def state_dict(self) -> dict[str, Tensor]:
        return dict(self.precisions)

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        for name, precision in self.precisions.items():
            precision.copy_(state[name])

    def gaussian_std(self, name: str, param: Tensor) -> Tensor:
        return self._precision(name, param).rsqrt()


class ARD(GammaHierarchical):
    r"""Automatic relevance determination (MacKay 1994; Nalisnick, "Hierarchical priors:
    structure"): one Gamma-distributed precision per *input unit* of each weight tensor,

    $$
    W_{ij} \mid \lambda_j \sim \mathcal{N}(0, \lambda_j^{-1}), \qquad
    \lambda_j \sim \mathrm{Gamma}(\alpha, \beta),
    $$

    so that an input whose outgoing weights are all small is switched off as a whole. Biases (and
    other one-dimensional tensors) keep one precision each. The Gibbs step is
    `GammaHierarchical`'s with groups the columns $W_{:,j}$ (for a convolution, input
    channel $j$ across output channels and kernel positions); ``curve.csv`` traces the mean
    precision of each tensor.
    """

    def group_dims(self, param: Tensor) -> tuple[int, ...]:
        if param.ndim < 2:
            return super().group_dims(param)
        return tuple(d for d in range(param.ndim) if d != 1)
