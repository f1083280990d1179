"""Analytical performance models: compute, memory, communication, training, inference."""
