"""``bdl-check``: every sampler against targets known in closed form (`targets`, `check_targets`,
`check`)."""
