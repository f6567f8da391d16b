"""Layer 2, the sans-io core: scoring policy and truncation, reduction, comparability and the
gate, suite statistics, rules-judge logic, episode diffs, replay matching and divergence,
findings.

Plain functions over model objects: no event loop, no files, no sockets. Imports only the model
(an import-linter contract forbids anyio, httpx, watchdog, sqlite3 and h11 here).
"""
