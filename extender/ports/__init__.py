"""Interfaces the use cases depend on and `kube/` implements (dependency inversion)."""
