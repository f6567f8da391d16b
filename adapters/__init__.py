"""Adapters that put litmus-sandbox in front of existing tool servers and harnesses."""
