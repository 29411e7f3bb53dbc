"""softplus against log(1 + e^x) taken in float64 by torch and mpmath, its derivative, its
variant into given memory; Buffer's memory kept across calls."""

import mpmath
import pytest
import torch

from bdl.numerics import Buffer, softplus


def reference(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x) in float64, in the forms that do not overflow or cancel."""
    x = x.double()
    return torch.where(x > 0, x + torch.log1p(torch.exp(-x)), torch.log1p(torch.exp(x)))


def arguments() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.cat(
        [
            0.5 * torch.randn(20000, generator=generator) - 4.6,  # σ ≈ 0.01, BBB's start
            30 * torch.randn(20000, generator=generator),
            torch.linspace(-85, 85, 20001),
        ]
    )


def test_softplus_is_within_four_units_in_the_last_place_in_float32():
    x = arguments()
    exact = reference(x)
    above_floor = exact > 1e-36  # where the result is not held up (documented)
    error = (softplus(x).double() - exact).abs() / exact
    assert error[above_floor].max().item() < 4 * 2**-24
    assert above_floor.float().mean() > 0.9


def test_softplus_in_float64_matches_mpmath():
    points = [-700.0, -40.0, -4.6, -1e-3, 0.0, 1e-3, 2.5, 21.0, 40.0, 700.0]
    ours = softplus(torch.tensor(points, dtype=torch.float64))
    for x, value in zip(points, ours.tolist()):
        exact = mpmath.log1p(mpmath.exp(mpmath.mpf(x)))
        assert value == pytest.approx(float(exact), rel=4 * 2**-53)


def test_softplus_never_reaches_zero():
    """Far below, the result stops near the smallest normal float (documented)."""
    tiny = softplus(torch.tensor([-200.0, -1e4]))
    assert (tiny > 0).all() and (tiny < 1e-36).all()


def test_softplus_into_given_memory_is_the_same_function():
    x = arguments()
    out, scratch = torch.empty_like(x), torch.empty_like(x)
    result = softplus(x, out=out, scratch=scratch)
    assert result.data_ptr() == out.data_ptr()
    assert torch.equal(result, softplus(x))


def test_softplus_derivative_is_the_logistic_function():
    x = torch.linspace(-30, 30, 61, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(softplus, (x,))
    (grad,) = torch.autograd.grad(softplus(x).sum(), x)
    torch.testing.assert_close(grad, 1 / (1 + torch.exp(-x.detach())))


def test_buffer_keeps_its_memory_until_the_layout_changes():
    buffer = Buffer()
    shapes = [torch.empty(3, 4), torch.empty(5)]
    first = buffer.like(shapes)
    assert [t.shape for t in first] == [(3, 4), (5,)]
    again = buffer.like([torch.empty(17)])
    assert again[0].data_ptr() == first[0].data_ptr()  # same size: same memory
    bigger = buffer.like([torch.empty(18)])
    assert bigger[0].numel() == 18
    as_double = buffer.like([torch.empty(18, dtype=torch.float64)])
    assert as_double[0].dtype == torch.float64
