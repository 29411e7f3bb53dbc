import math

import pytest

from bdl.schedules import Constant, Cyclical, Polynomial


def test_constant_collects_every_thin_epochs_after_burn_in():
    schedule = Constant(total_steps=100, steps_per_epoch=10)
    assert schedule(57) == 1.0 and not schedule.explores(3)
    kept = [e for e in range(10) if schedule.collects(e, burn_in=4, thin=2)]
    assert kept == [5, 7, 9]


def test_polynomial_is_welling_teh_decay():
    schedule = Polynomial(total_steps=10_000, steps_per_epoch=100, b=100.0, gamma=0.55)
    assert schedule(0) == 1.0
    # a (b + t)^-γ divided by its value at t = 0
    assert schedule(900) == pytest.approx((100 + 900) ** -0.55 / 100**-0.55)


@pytest.mark.parametrize("gamma", [0.5, 1.2])
def test_polynomial_rejects_gamma_outside_half_open_interval(gamma):
    with pytest.raises(ValueError, match="gamma"):
        Polynomial(100, 10, gamma=gamma)


def test_cyclical_cosine_cycles_exploration_and_collection():
    schedule = Cyclical(total_steps=400, steps_per_epoch=10, cycles=4, exploration=0.5)
    assert schedule.cycle_length == 100
    assert schedule(0) == 1.0 and schedule(100) == 1.0
    assert schedule(50) == pytest.approx(0.5 * (math.cos(math.pi * 0.5) + 1))
    assert schedule.explores(49) and not schedule.explores(50)
    kept = [e for e in range(40) if schedule.collects(e, burn_in=0, thin=1)]
    assert kept == [9, 19, 29, 39]  # the last epoch of each cycle
    assert [e for e in range(40) if schedule.collects(e, burn_in=15, thin=1)] == [19, 29, 39]


def test_cyclical_keeps_several_samples_per_cycle():
    schedule = Cyclical(400, 10, cycles=2, exploration=0.5, samples_per_cycle=3)
    assert [e for e in range(40) if schedule.collects(e, 0, 1)] == [17, 18, 19, 37, 38, 39]


def test_cyclical_defaults_to_zhang_et_al_s_four_cycles():
    """Zhang et al. (2020)'s cSG-MCMC: four cycles; the step restarts at its peak at the start of
    each, steps 0, 25, 50 and 75 of 100."""
    schedule = Cyclical(total_steps=100, steps_per_epoch=1)
    assert [t for t in range(100) if schedule(t) == 1.0] == [0, 25, 50, 75]


@pytest.mark.parametrize(
    "make, line",
    [
        (
            lambda: Constant(0, 10),
            "a schedule needs at least one step per epoch and one step in all",
        ),
        (lambda: Polynomial(100, 10, gamma=0.5), "schedule.gamma must be in (0.5, 1], got 0.5"),
        (lambda: Polynomial(100, 10, b=0), "schedule.b must be positive and finite, got 0"),
        (lambda: Cyclical(100, 10, cycles=0), "schedule.cycles must be at least 1, got 0"),
        (lambda: Cyclical(100, 10, exploration=1), "schedule.exploration must be in [0, 1), got 1"),
        (
            lambda: Cyclical(100, 10, samples_per_cycle=0),
            "schedule.samples_per_cycle must be at least 1",
        ),
    ],
)
def test_a_schedule_out_of_range_is_one_line_naming_its_key_and_range(make, line):
    with pytest.raises(ValueError) as error:
        make()
    assert str(error.value) == line


def test_only_the_constant_step_can_be_lengthened_as_the_run_goes():
    # until_converged extends the run: a decay or a cycle is laid out over the run's length
    assert Constant.extendable() and Constant(100, 1).extendable()
    assert not Polynomial.extendable() and not Cyclical(100, 1).extendable()

    class Warmup(Constant):
        def __call__(self, t: int) -> float:
            return min(1.0, t / 10)

    assert not Warmup.extendable()
