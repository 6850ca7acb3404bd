"""How the services and the CLI reach the servers they depend on.

`clients.coordinator` is the client of the coordinator's HTTP API (failover between coordinators,
back-off, rate limits) that the agents, the load generator and the CLI share; `clients.redis`
connects the agent service and the load generator to the Redis that holds the activation streams
(retried until it answers; a single Redis or a cluster).
"""
