"""From a command line to the objects of a run: the root config's schema (`config`), the checks
of overrides and of what Hydra composes (`overrides`), what a config may build (`allowlist`,
`instantiation`, `plugins`) and the network a config names (`network`). Imports the library only."""
