"""Planner benchmark: parse+render time of a 200-line script, submit time vs its scheduler calls."""
