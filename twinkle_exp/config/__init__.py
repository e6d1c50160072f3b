"""Configuration: the loop's schema types, the Hydra store derived from the registries, and the start-up checks.

Import the submodule you need: `config.schema` (types and the relations between their settings, imports no
stage), `config.store` (Hydra's ConfigStore and `typed_config`), `config.checks` (every problem of a
composed config, one line each, by kind: fields, relations, environment, built objects).
"""
