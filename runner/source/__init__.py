"""What a user wrote, read safely: YAML with positions, paths that stay inside their root,
regular files, data files, runner.toml, JSON-schema predicates, and the secrets runner holds
(kept out of step environments, masked in everything it prints). Imports only ``runner.errors``."""
