"""A cluster's life cycle: its settings, connection files and keys, the launchers that start
its processes, and what the `zpar cluster|profile|config|controller|engine` commands do."""
