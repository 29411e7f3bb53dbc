"""Hydra configs of bdl-run, installed as the package ``bdl.conf`` (see pyproject.toml).

Hydra imports this package to read its files: here, first, the root schema and the installed
packages' options join its config store (`bdl.composition.config.register`), so that every way
of composing these files (``bdl-run``, ``run_model``, a test's ``compose``) finds them."""

from bdl.composition.config import register

register()
