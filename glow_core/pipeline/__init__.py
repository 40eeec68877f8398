"""The compile pipeline as data: steps, their order, and the runner that times, verifies
and dumps each one.

``data`` holds the Pipeline structure, ``runner`` runs one, ``steps`` the built-in steps and
the default pipeline. This package imports nothing eagerly: the graph pass manager uses
``data`` and ``runner`` while ``steps`` imports the passes, so an eager import would cycle.
"""
