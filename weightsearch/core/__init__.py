"""The shared core every layer may import: errors, settings fields, registries, YAML, extras."""
