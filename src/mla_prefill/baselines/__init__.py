"""Baseline solutions packed next to ours (each folder is one solution's sources)."""
