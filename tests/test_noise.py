"""Noise for chains stacked along the first dimension: chain ``k``'s draws are exactly those a
run of that chain alone makes from the same generator state."""

import torch

from bdl.noise import StandardNormal, chain_shape, uniform


def test_stacked_normal_draws_are_each_chains_own_flat_draw():
    shapes = [(3, 4), (4,), (2, 3, 2)]
    chains = 3
    alone = [
        StandardNormal().like([torch.empty(s) for s in shapes], torch.Generator().manual_seed(k))
        for k in range(chains)
    ]
    generators = [torch.Generator().manual_seed(k) for k in range(chains)]
    stacked = StandardNormal().like([torch.empty(chains, *s) for s in shapes], generators)
    for k in range(chains):
        for mine, theirs in zip(stacked, alone[k], strict=True):
            assert torch.equal(mine[k], theirs)


def test_stacked_uniforms_are_each_chains_own():
    generators = [torch.Generator().manual_seed(k) for k in range(4)]
    draws = uniform(torch.Size([4]), generators, torch.device("cpu"))
    for k in range(4):
        alone = torch.rand((), generator=torch.Generator().manual_seed(k), dtype=torch.float64)
        assert draws[k] == alone


def test_chain_shape_is_one_value_per_stacked_chain():
    generators = [torch.Generator().manual_seed(k) for k in range(3)]
    assert chain_shape(generators) == (3,)
    assert chain_shape(generators[0]) == chain_shape(None) == ()
