"""The plugin code each model's test pipeline needs, written by the project from the published
repositories' behaviour (one module per model; each lists its differences from the original)."""
