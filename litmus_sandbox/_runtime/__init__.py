"""Layer 4, the runtime: the sandbox and its recorder, fidelity modes, tool calls, replay,
the scorer and rebaseline.

Imports everything below it: model, core, stores, config, judges and oracles.
"""
