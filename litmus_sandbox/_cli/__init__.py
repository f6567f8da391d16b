"""Layer 5, an edge: the ``litmus-sandbox`` command line. Nothing in the package imports it.

The console script is :func:`litmus_sandbox._cli.main.main`.
"""
