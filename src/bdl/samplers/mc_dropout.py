r"""Monte Carlo dropout (Gal & Ghahramani, ICML 2016, "Dropout as a Bayesian approximation").

A fully connected network trained with dropout on its hidden units, and dropout kept at
prediction: each prediction with a fresh mask is a draw from an approximate posterior over the
weights, and their average is the model average. Dropping hidden unit $j$ of a layer is
zeroing column $j$ of the next weight matrix, so with masks
$m_j \sim \mathrm{Bernoulli}(1 - p)$ and $s = m / (1 - p)$ (inverted dropout: the
expectation of $W \mathrm{diag}(s)$ is $W$) each step is SGD on the dropped-out
weights,

$$
\tilde W = W \,\mathrm{diag}(s), \qquad
W \leftarrow W - \eta\, \nabla_{\tilde W} \tilde U(\tilde W)\, \mathrm{diag}(s),
$$

the chain rule through the mask (one mask per minibatch, drawn from the sampler's generator so
that a run resumes bit for bit; per-example masks estimate the same expected loss with less
variance). The prior's term is taken at $\tilde W$ too. After training,
``num_samples`` draws of $\tilde W$ are the run's samples, written like any sampler's: a
network holding one predicts with that draw's mask (the runner predicts without dropout), so
every metric of the model average is MC dropout's. Hidden units are dropped at every layer after
the first; the inputs are kept.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor, nn

from bdl.closures import Closure, Evaluation
from bdl.noise import Generator
from bdl.potential import Potential
from bdl.samplers.base import Batches, Declaration, SamplerState
from bdl.samplers.sgd import SGD


class MCDropout(SGD):
    """SGD (``lr``, ``momentum``) with dropout of rate ``p`` on the hidden units, then
    ``num_samples`` dropout masks on the trained weights as the samples."""

    declaration = Declaration(step_unit="per datum", injects_noise=False, backs_off=True)

    def __init__(
        self,
        lr: float,
        momentum: float = 0.0,
        p: float = 0.5,
        num_samples: int = 30,
        *,
        foreach: bool = True,
        generator: Generator = None,
    ) -> None:
        super().__init__(lr, momentum, foreach=foreach, generator=generator)
        if not 0 < p < 1:
            raise ValueError(f"sampler.p (the dropout rate) must be in (0, 1), got {p}")
        if num_samples < 1:
            raise ValueError(f"sampler.num_samples must be 1 or more, got {num_samples}")
        self.p = p
        self.num_samples = num_samples
        #: the parameters' positions whose columns are hidden units (weights after the first)
        self.masked: list[int] = []

    def attach(self, potential: Potential, batches: Batches) -> None:
        self.masked = hidden_unit_weights(potential.model, potential.params)

    def _scales(self, params: list[Tensor]) -> list[Tensor]:
        """One inverted-dropout scale per column of each masked weight: 0 or 1 / (1 - p)."""
        scales = []
        for i in self.masked:
            columns = params[i].shape[1]
            kept = torch.rand(columns, generator=self.generator, device=params[i].device) >= self.p
            scales.append(kept.to(params[i].dtype) / (1 - self.p))
        return scales

    def closure_for(self, state: SamplerState, closure: Closure) -> Closure:
        """``closure``'s gradient through a fresh mask, and ``U`` at the weights themselves: the
        potential a step records (the runner's yardstick, `bdl.runner.stability`, and the
        curve) is that of the network being trained. ``U`` at the masked weights spreads with the
        mask (on yacht's full batches by 100-600 from step to step at ``p`` = 0.5, against a
        rise limit of 298), which burn-in read as the chain heating: it halved the step twenty
        times and stopped the run at the defaults, advising a smaller ``lr`` that could not
        narrow the masks' spread. The potential's closure gives ``U`` by a forward pass
        (``value``); another closure is evaluated at the weights whole."""
        params, scales = state.params, self._scales(state.params)
        unmasked = getattr(closure, "value", None) or (lambda: closure()[0])

        def dropped_out() -> Evaluation:
            kept = [params[i].clone() for i in self.masked]
            for i, s in zip(self.masked, scales, strict=True):
                params[i].mul_(s)
            try:
                _, grads = closure()
            finally:
                for i, w in zip(self.masked, kept, strict=True):
                    params[i].copy_(w)
            for i, s in zip(self.masked, scales, strict=True):
                grads[i].mul_(s)
            return unmasked(), grads

        return super().closure_for(state, dropped_out)

    def final_samples(self, state: SamplerState) -> Iterator[None]:
        trained = [p.detach().clone() for p in state.params]
        try:
            for _ in range(self.num_samples):
                with torch.no_grad():
                    for i, s in zip(self.masked, self._scales(state.params), strict=True):
                        state.params[i].copy_(trained[i] * s)
                yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_(state.params, trained)


def hidden_unit_weights(model: nn.Module, params: list[Tensor]) -> list[int]:
    """The positions in ``params`` of the weight matrices of ``model``'s linear layers after the
    first, whose columns are hidden units; a network without any is refused in one line."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    convolutional = any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    if len(linears) < 2 or convolutional:
        raise ValueError(
            "sampler=mc_dropout drops the hidden units of a fully connected network: use "
            "model=mlp with at least one hidden layer (protocol.mlp.hidden)"
        )
    position = {id(p): i for i, p in enumerate(params)}
    return [position[id(layer.weight)] for layer in linears[1:]]
