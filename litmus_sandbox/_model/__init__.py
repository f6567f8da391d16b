"""Layer 1, the model: msgspec records, their codec, JSON paths and the error hierarchy.

Pure data, no I/O; imports only msgspec and the standard library. Every other layer builds on it.
"""
