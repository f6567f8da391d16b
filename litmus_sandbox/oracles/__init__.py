"""Side-effect oracles: filesystem, network egress and state probes, and findings."""
