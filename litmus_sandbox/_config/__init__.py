"""Layer 3, configuration: the policy document (one TOML file, decoded once) and what it
configures: tool fidelity modes, replay, egress rules, scoring and the judge.

Imports the model and the core.
"""
