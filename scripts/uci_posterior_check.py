"""Does a regression run sample the posterior of a reference run of the same posterior (a long
full-batch HMC run)? Prints, over the test points, the ratio of the standard deviations of the
network's output f and the distance between its means in the reference's standard deviations
(``bdl.metrics.function_agreement``); the UCI protocol's goal is a width within 10% and means
within 0.15 standard deviations. For runs of several chains, also the offset that Monte Carlo error
alone gives runs of these lengths (``noise``, from the spread of the chains' means): an offset
near it is no evidence of a bias.

    python scripts/uci_posterior_check.py REFERENCE_RUN RUN [RUN ...]
"""

from __future__ import annotations

import argparse
import sys

from torch import Tensor

import bdl
from bdl.analysis.evaluate import USER_ERRORS, user_message
from bdl.metrics import function_agreement


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()

    def moments(run: str) -> tuple[tuple[Tensor, Tensor], Tensor | None]:
        """The run's function moments and, with several chains, their standard errors."""
        try:
            posterior = bdl.load_run(run)
            error = posterior.function_standard_error() if posterior.num_chains > 1 else None
            return posterior.function_moments(), error
        except USER_ERRORS as e:
            sys.exit(f"uci_posterior_check: error: {run}: {user_message(e)}")

    reference, reference_error = moments(args.reference)
    print(f"{'run':<60} {'width':>6} {'min':>5} {'max':>5} {'offset':>7} {'noise':>6}")
    for run in args.runs:
        other, error = moments(run)
        both = reference_error is not None and error is not None
        errors = (reference_error, error) if both else None
        result = function_agreement(reference, other, errors)
        noise = f"{result['mean_offset_noise']:>6.3f}" if errors else f"{'':>6}"
        print(
            f"{run[-60:]:<60} {result['width_ratio']:>6.3f} {result['width_ratio_min']:>5.2f} "
            f"{result['width_ratio_max']:>5.2f} {result['mean_offset']:>7.3f} {noise}"
        )


if __name__ == "__main__":
    main()
