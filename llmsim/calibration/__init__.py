"""Measured operator timings: read them (Vidur and generic CSV), fit a profile to them, validate against them."""
