"""Simulation commands: demo, trace, lesson, conform."""
