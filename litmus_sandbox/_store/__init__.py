"""Layer 3, stores: episode and verdict streams (append-only JSON Lines, streaming readers that
name ``file:line``), exclusion files and the step-verdict cache (SQLite).

Imports the model and the core.
"""
