"""Data parallelism: collectives (identities in one process), FSDP2 sharding, ranks, the launcher's environment."""
