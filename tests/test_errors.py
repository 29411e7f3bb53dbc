"""The "did you mean" of every one-line refusal (`bdl.errors`): a key given by its leaf alone is
offered its dotted paths, a misspelt one the closest spelling, case aside, and nothing when no
candidate is near."""

from bdl.errors import did_you_mean, suggestions

KEYS = ["epochs", "seed", "sampler.lr", "schedule.lr", "sampler.friction", "sghmc", "burn_in"]


def test_a_leaf_is_offered_its_dotted_keys():
    assert suggestions("lr", KEYS) == ["sampler.lr", "schedule.lr"]
    assert did_you_mean("lr", KEYS, "0.1") == ": did you mean sampler.lr=0.1 or schedule.lr=0.1?"


def test_a_misspelling_is_offered_the_closest_spelling_case_aside():
    assert suggestions("epoch", KEYS) == ["epochs"]
    assert suggestions("SGHMC", KEYS) == ["sghmc"]
    assert suggestions("burnin", KEYS) == ["burn_in"]
    assert did_you_mean("epoch", KEYS) == ": did you mean epochs?"


def test_nothing_near_is_offered_nothing():
    assert suggestions("temperature", KEYS) == []
    assert did_you_mean("temperature", KEYS, "2") == ""
