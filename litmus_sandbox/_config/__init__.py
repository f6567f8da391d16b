"""Layer 3, configuration: the policy document (one TOML file, decoded once) and what it
configures: tool fidelity modes, replay, egress rules, scoring and the judge.

``document`` decodes and checks the whole file (every consumer reads it there); ``tools``,
``scoring`` and ``egress`` hold the tables' Structs; ``policy`` is the :class:`Policy` the
sandbox applies; ``explain`` words a mistake as one line naming file, table and key. Live
judges are built one layer up, in ``litmus_sandbox.judges``.

Imports the model, the core and the stores.
"""
