"""dexp's algorithm core: pure Python + numpy, no I/O.

Shared by the coordinator (global vote rule), the agents (local elimination), the load generator
(environments, activation distributions) and the in-process simulators.
"""
