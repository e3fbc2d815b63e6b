"""Implementations under test. ``native`` is the ground truth; the others are held to it."""
