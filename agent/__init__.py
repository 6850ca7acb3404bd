"""Agents: run local elimination on private rewards and send only votes to the coordinator.

`agent.library.Agent` is what an application embeds; `agent.service` hosts many of them in one
process, in one experiment or several (as an application running several tests), fed by Redis
streams of activations.
"""
