"""The error of a config a user can fix, shared by the config's validation (`bdl.config`) and
what a config may build (`bdl.instantiation`), which the validation runs; ``bdl-run``
prints it as one line (`bdl.cli`)."""


class ConfigError(ValueError):
    """A config value out of its range; the message names the key and the fix."""
