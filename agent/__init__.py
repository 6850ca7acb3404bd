"""Agents: run local elimination on private rewards and send only votes to the coordinator.

`agent.library.Agent` is what an application embeds (choose, observe, vote, follow the global
set). The agent service (`python -m agent`, agent/host.py) hosts many of them in one process, in
one experiment or several (as an application running several tests), fed by Redis streams of
activations: agent/discovery.py decides which experiments it hosts, agent/enrollment.py enrolls
their agents (tickets, open enrollment), agent/streams.py reads and acknowledges the activations,
agent/following.py follows the global sets; agent/state.py keeps agents across restarts and
agent/settings.py reads the configuration.
"""
