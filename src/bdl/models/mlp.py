"""Fully connected networks, the workhorse of the UCI and MNIST experiments."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "sigmoid": nn.Sigmoid,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    # Swish x·σ(x) (Ramachandran et al. 2017, "Searching for activation functions") is smooth,
    # which keeps the potential's gradient Lipschitz, unlike ReLU.
    "swish": nn.SiLU,
}


def make_activation(name: str) -> nn.Module:
    """Activation by config name; errors name the config key so a typo is found from the CLI."""
    try:
        return ACTIVATIONS[name]()
    except (KeyError, TypeError):
        choices = ", ".join(sorted(ACTIVATIONS))
        raise ValueError(f"model.activation must be one of {{{choices}}}, got {name!r}") from None


def _widths(hidden: int | Iterable[int]) -> list[int]:
    # Hydra hands over an OmegaConf ListConfig; a bare int is a single hidden layer.
    widths = [hidden] if isinstance(hidden, int) else [int(h) for h in list(hidden)]
    if any(w < 1 for w in widths):
        raise ValueError(f"model.hidden widths must be positive integers, got {widths}")
    return widths


class MLP(nn.Module):
    r"""Multilayer perceptron on flattened inputs.

    The defaults (one hidden layer of 100 sigmoid units) are the network of the SGLD/SGHMC papers
    (Welling & Teh 2011; Chen et al. 2014). The layers live in one ``nn.Sequential`` so parameter
    names (``layers.0.weight``, ``layers.2.bias``, ...) are stable across runs and can key saved
    samples and per-layer diagnostics.

    ``init_std`` draws the initial weights from $\mathcal{N}(0, s^2)$ with zero biases, as in
    Chen et al. (2014)'s code ($s = 0.01$); ``None`` keeps PyTorch's default initialisation.
    """

    def __init__(
        self,
        input_shape: tuple[int, ...],
        out_features: int,
        hidden: int | Iterable[int] = (100,),
        activation: str = "sigmoid",
        init_std: float | None = None,
    ) -> None:
        super().__init__()
        if init_std is not None and not 0 < init_std < math.inf:
            raise ValueError(
                f"model.init_std must be positive and finite (or null), got {init_std}"
            )
        in_features = math.prod(input_shape)
        make_activation(activation)  # validate even when there are no hidden layers
        modules: list[nn.Module] = []
        for width in _widths(hidden):
            modules += [nn.Linear(in_features, width), make_activation(activation)]
            in_features = width
        modules.append(nn.Linear(in_features, out_features))
        self.layers = nn.Sequential(*modules)
        if init_std is not None:
            for layer in self.layers:
                if isinstance(layer, nn.Linear):
                    nn.init.normal_(layer.weight, std=init_std)
                    nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x.flatten(1))

    def chain_forward(self, params: Mapping[str, Tensor], x: Tensor, shared: bool) -> Tensor:
        """The networks of ``K`` chains at once, ``params`` holding their parameters stacked
        along a leading dimension under this module's parameter names (`bdl.runner.steppers`):
        outputs ``(K, n, out)`` for ``x`` of shape ``(K, n, ...)``, or ``(n, ...)`` when it is
        ``shared`` by all chains. Batched matrix products on the tensors as given, without the
        per-operation cost of ``torch.func.vmap`` or the parameter swaps of
        ``torch.func.functional_call``, which dominate a small network's step.

        The activations are carried features first, ``(K, features, n)``, and each layer is
        ``W h + b``, whose gradient in ``W`` comes out in ``W``'s own layout: measured on the
        CPU, the stacked MNIST step takes about 0.9 of its time with ``h Wᵀ + b`` on
        ``(K, n, features)``, and so does yacht's compiled potential and gradient
        (``scripts/bench_chains.py``).

        A ``shared`` input meets a first layer that widens it (a UCI network's 6 to 13 inputs into
        50 units) in one product for all chains, ``W x^T`` with the ``K`` weight matrices laid
        end to end in column-major order: autograd then forms their gradient as
        ``(x^T G^T)^T``, whose product MKL's sgemm computes 3 to 4 times as fast as ``G x`` with
        its few columns (yacht's 8 stacked chains on the 2-core EPYC: 58 against 265 µs of a
        compiled leapfrog step of about 400). ``x^T`` is made contiguous: as a view of ``x``
        (both operands of that product transposed) sgemm took 370 µs for what it does in 35
        with ``x^T`` laid out in rows (16 chains, one thread, on a Xeon with AVX-512), a third of
        a compiled leapfrog step (``scripts/bench_peers.py --part gradient``: per gradient
        2.19 times BlackJAX's before, 1.43 after)."""
        first = params["layers.0.weight"]
        if shared and first.shape[2] < first.shape[1]:
            chains, width = first.shape[:2]
            weight = first.reshape(chains * width, -1).T.contiguous().T  # column-major
            bias = params["layers.0.bias"].reshape(-1, 1)
            h = torch.addmm(bias, weight, x.flatten(1).T.contiguous()).view(chains, width, -1)
            return self._chain_layers(params, h, start=1)
        h = x.flatten(1) if shared else x.flatten(2)
        if shared:  # a view: the products read the one input K times
            h = h.expand(first.shape[0], *h.shape)
        return self._chain_layers(params, h.transpose(1, 2), start=0)

    def _chain_layers(self, params: Mapping[str, Tensor], h: Tensor, start: int) -> Tensor:
        """The layers from ``start`` on, for ``K`` chains' activations ``h`` carried features
        first, ``(K, features, n)``; outputs ``(K, n, out)``."""
        for i in range(start, len(self.layers)):
            layer = self.layers[i]
            if isinstance(layer, nn.Linear):
                weight, bias = params[f"layers.{i}.weight"], params[f"layers.{i}.bias"]
                h = torch.baddbmm(bias.unsqueeze(2), weight, h)
            else:  # elementwise: the layout does not matter
                h = layer(h)
        return h.transpose(1, 2)
