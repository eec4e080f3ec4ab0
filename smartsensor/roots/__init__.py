"""Composition roots: one module per process that builds its parts (engine → stores → catalog backend → ranges →
publisher → notification hub → loop), and nothing else builds them. The commands (``smartsensor.cli``) parse their
options and call a root; a test or a benchmark that needs a process's parts asks the root for them too. A root sits
with the entry points, above every layer it wires.
"""
