"""Hydra configs of bdl-run, installed as the package ``bdl.conf`` (see pyproject.toml)."""
