"""The agents' leases: the process renews them while it runs, so that its agents stay enrolled;
killed without a word (kill -9, a crashed container, a lost machine), it renews nothing, and the
coordinator makes its agents leave once their lease lapses (DEXP_AGENT_LEASE_SECONDS,
coordinator/leases.py), as DELETE /v1/agents/me would on SIGTERM.

One request per renewal for all the process's agents (POST /v1/agents/leases carries their
tokens, MAX_TOKENS a request), every third of the lease the coordinator names in its reply, and
at once at start: restored agents whose lease lapsed while the process was down are then known
at once. An agent the coordinator calls `gone` (its lease lapsed: the process was stopped, frozen
or cut off for a whole lease) is forgotten, and the next discovery round enrolls another in its
place (agent/discovery.py). An older coordinator without the route (404): no renewal, said once.
"""

from __future__ import annotations

import logging
import time

from agent.discovery import Discovery
from clients.coordinator import CoordinatorClient, CoordinatorError, RateLimited

log = logging.getLogger("dexp.agent.service")
MAX_TOKENS = 500  # per request (coordinator/api/leases.py)
RENEWALS_PER_LEASE = 3


class Renewal:
    """When the leases are renewed next, and the renewal itself."""

    def __init__(self, client: CoordinatorClient, discovery: Discovery) -> None:
        self.client = client
        self.discovery = discovery
        self.next_at = 0.0  # at once at start
        self.lease_seconds: float | None = None  # as the coordinator last said
        self.unsupported = False
        self.renewals = 0

    def renew_if_due(self, now: float) -> None:
        if self.unsupported or now < self.next_at:
            return
        agents = [(h, a) for h in self.discovery.hosted.values() for a in h.agents.values()]
        gone = []
        try:
            for start in range(0, len(agents), MAX_TOKENS):
                chunk = agents[start : start + MAX_TOKENS]
                reply = self.client.renew_leases([a.token for _, a in chunk])
                self.lease_seconds = float(reply["lease_seconds"])
                outcomes = reply["outcomes"]
                gone += [item for item, o in zip(chunk, outcomes, strict=True) if o == "gone"]
        except RateLimited as exc:
            # Rate-limited (a proxy's per-address limit, in production): the next renewal after
            # its Retry-After. The host's loop never sleeps on a renewal: it feeds its agents
            # meanwhile (a wait of up to 30 s there stalled a load generator's run), and a lease
            # is three renewal periods long.
            self.next_at = time.monotonic() + exc.retry_after
            log.info("lease renewal rate-limited: again in %.1f s", exc.retry_after)
            return
        except CoordinatorError as exc:
            if exc.status != 404:
                raise
            self.unsupported = True
            log.warning("the coordinator renews no lease (404: an older one): none renewed")
            return
        self.renewals += 1
        for hosted, agent in gone:
            self.discovery.forget(hosted, agent)
        if gone:
            log.warning(
                "%d agent(s) no longer enrolled (their lease lapsed: this process was stopped, "
                "frozen or cut off for DEXP_AGENT_LEASE_SECONDS): forgotten, new ones enroll in "
                "their place",
                len(gone),
            )
        period = (self.lease_seconds or 3.0 * RENEWALS_PER_LEASE) / RENEWALS_PER_LEASE
        self.next_at = time.monotonic() + period
