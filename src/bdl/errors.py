"""The error of a config a user can fix, shared by the config's validation
(`bdl.composition.config`), what a config may build (`bdl.composition.instantiation`) and the
data loaders; ``bdl-run`` prints it as one line (`bdl.cli`), with the "did you mean" its checks
suggest."""

import difflib
from collections.abc import Iterable


class ConfigError(ValueError):
    """A config value out of its range; the message names the key and the fix."""


def suggestions(word: str, candidates: Iterable[str]) -> list[str]:
    """The candidates ``word`` was probably meant as: the dotted keys that end in it
    (``lr``: ``sampler.lr``), else the one spelt closest, case aside (``epoch``: ``epochs``,
    ``SGHMC``: ``sghmc``)."""
    by_lower = {c.lower(): c for c in candidates}
    leaf = word.rpartition(".")[2]
    same_leaf = [c for c in by_lower.values() if c != word and c.rpartition(".")[2] == leaf]
    closest = difflib.get_close_matches(word.lower(), by_lower, n=1, cutoff=0.7)
    return same_leaf[:3] or [by_lower[c] for c in closest]


def did_you_mean(word: str, candidates: Iterable[str], value: str | None = None) -> str:
    """``": did you mean epochs=20?"`` (without ``value``: ``"epochs"``), or ``""``."""
    found = suggestions(word, candidates)
    if not found:
        return ""
    shown = [f"{c}={value}" if value is not None else c for c in found]
    return f": did you mean {' or '.join(shown)}?"
