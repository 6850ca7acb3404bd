"""Enrollment: how the agent service gets the agents it hosts, with tickets or the open secret.

Each agent that is not restored (agent/discovery.py, "Restarts") takes one ticket of its own
experiment (DEXP_TICKETS, DEXP_TICKETS_FILE: a ticket names its experiment, so one list serves
several, and it is read again at each discovery round and whenever the tickets read are used up, so
tickets appended later are used): the process walks that experiment's tickets from a random offset
(replicas may share one file), skips a ticket refused with 401 (used by another replica, expired, or
burnt by a lost reply) and tries the next, saying so in one line (a line per ticket only at
DEBUG). Before it walks them, it asks the coordinator which are still unused (their digests only:
POST /v1/experiments/{id}/tickets/unused) and skips the others: a replica scaled up next to
replicas that used most of a shared file does not spend a refused enrollment (and a failed
credential check, which the coordinator throttles per address) on each. Tickets are not subject to open enrollment's per-address
limits (number and rate): the way to enroll many agents from one machine. When they run out first,
the experiment gets one line saying how to get more tickets. Without tickets, agents enroll with the
shared secret (open enrollment, refused by a production coordinator unless it allows it). Tickets
and tokens are never logged. Every agent enrolls as simulated (`simulated: true`): it plays the
load generator's problem, not a real device's rewards, and the experiment counts it as such; and
with a lease (`lease: true`), which the process renews (agent/leases.py): killed without a word,
its agents leave once their lease lapses.

What stops an enrollment is raised for the caller (agent/discovery.py) to log and retry or not:
EnrollmentFailed (no ticket left, none configured, the tickets file unreadable, open enrollment
refused with 401: retried every DEXP_DISCOVER_SECONDS), or EnrollmentLimited (a limit of the
coordinator, 403: waiting does not lift it, so it is not asked again; its one log line names the
limit and the fix).
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections import Counter
from collections.abc import Iterator

import numpy as np

from agent.library import Agent, GlobalView
from agent.settings import AgentSettings, ticket_experiment
from clients.coordinator import CoordinatorClient, CoordinatorError

# The agent service's log lines keep the name operators filter on, whichever module writes them.
log = logging.getLogger("dexp.agent.service")
MAX_DIGESTS = 500  # per request of POST .../tickets/unused (coordinator/api/tickets.py)


class EnrollmentFailed(RuntimeError):
    """An experiment's agents cannot all be hosted: it does not exist, the tickets ran out or
    cannot be read, or the coordinator refused enrollment."""


class EnrollmentLimited(EnrollmentFailed):
    """The coordinator refuses to enroll more agents in an experiment (403) at one of its limits:
    the experiment has its maximum of agents (DEXP_MAX_AGENTS), or this client address its maximum
    under open enrollment (DEXP_MAX_AGENTS_PER_CLIENT). Waiting does not lift it: not retried."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    @property
    def per_client(self) -> bool:
        return "DEXP_MAX_AGENTS_PER_CLIENT" in self.detail

    def line(self, experiment: str, enrolled: int, wanted: int, tickets: bool) -> str:
        """The one log line: which limit, what this process keeps, and the fix."""
        missing = wanted - enrolled
        kept = (
            f"this process hosts the {enrolled} of its {wanted} agent(s) it got and does not ask "
            "for more"
            if enrolled
            else f"this process got none of its {wanted} agent(s)"
        )
        if self.per_client:
            fix = (
                f"enroll with tickets instead (`dexp tickets issue {experiment} --count "
                f"{missing}`, then DEXP_TICKETS_FILE; tickets are not subject to this limit of "
                "open enrollment, which counts every process of one address as one client), or "
                "raise DEXP_MAX_AGENTS_PER_CLIENT on the coordinator, then restart this process"
            )
        elif "DEXP_MAX_AGENTS" in self.detail:
            fix = (
                "raise DEXP_MAX_AGENTS on the coordinator (its experiments then admit more "
                "agents), then restart this process"
            )
        else:
            fix = "see the coordinator's reason; restart this process once it is resolved"
        via = "with tickets" if tickets else "under open enrollment"
        return (
            f"experiment {experiment}: the coordinator refuses to enroll more agents {via} "
            f"(403: {self.detail}): {kept}; to host all {wanted}, {fix}"
        )


class Tickets:
    """The configured tickets, walked once in a circle from a random offset: several replicas that
    share one list mostly start on different tickets, and each ticket is tried at most once."""

    def __init__(self, tickets: list[str], rng: random.Random | None = None) -> None:
        self.tickets = tickets
        self.start = (rng or random.SystemRandom()).randrange(len(tickets)) if tickets else 0
        self.tried = 0
        self.refused = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        """(position in the list from 1, ticket), each ticket once."""
        while self.tried < len(self.tickets):
            index = (self.start + self.tried) % len(self.tickets)
            self.tried += 1
            yield index + 1, self.tickets[index]


def ticket_label(ticket: str) -> str:
    """What a log may show of a ticket: `ticket.<id>.<secret>` without its secret."""
    head, _, secret = ticket.rpartition(".")
    return f"{head}.…" if head and secret else "(malformed ticket)"


class Enrollment:
    """Enrolls new agents for the agent service, and remembers across rounds the tickets used or
    refused (never tried again) and, per experiment, how many were refused."""

    def __init__(self, settings: AgentSettings, client: CoordinatorClient) -> None:
        self.settings = settings
        self.client = client
        self.spent: set[str] = set()  # tickets used or refused: never tried again
        self.refused: Counter[str] = Counter()  # per experiment, tickets refused
        self.malformed_logged = False

    def tickets_of(self, experiment: str) -> list[str]:
        """The configured tickets of `experiment`, the list read again (a file may have grown)."""
        try:
            tickets = self.settings.ticket_list()
        except OSError as exc:
            raise EnrollmentFailed(
                f"cannot read the tickets file DEXP_TICKETS_FILE={self.settings.tickets_file}: "
                f"{exc.strerror or exc}"
            ) from None
        malformed = sum(1 for t in tickets if not ticket_experiment(t))
        if malformed and not self.malformed_logged:
            self.malformed_logged = True
            log.warning(
                "%d ticket(s) ignored: not of the form ticket.<experiment>.<secret>", malformed
            )
        return [t for t in tickets if ticket_experiment(t) == experiment]

    def unused(self, tickets: list[str], experiment: str) -> list[str]:
        """Of `tickets`, those the coordinator knows unused (POST .../tickets/unused, with their
        digests only): the others are spent without a refused enrollment each. Advice only: a
        coordinator that cannot answer (an older one, an error) leaves the list as it is, and
        enrollment decides."""
        digests = {hashlib.sha256(t.encode()).hexdigest(): t for t in tickets}
        unused: set[str] = set()
        order = list(digests)
        try:
            for start in range(0, len(order), MAX_DIGESTS):
                reply = self.client.request(
                    "POST",
                    f"/v1/experiments/{experiment}/tickets/unused",
                    json={"digests": order[start : start + MAX_DIGESTS]},
                )
                unused.update(reply["unused"])
        except (CoordinatorError, KeyError, TypeError):
            return tickets
        known = [t for d, t in digests.items() if d not in unused]
        self.spent.update(known)
        self.refused[experiment] += len(known)
        if known and unused:  # all used: the out-of-tickets line alone says it
            log.info(
                "experiment %s: skipping %d ticket(s) the coordinator knows used, expired or "
                "unknown; %d left to try",
                experiment,
                len(known),
                len(unused),
            )
        return [t for d, t in digests.items() if d in unused]

    def enroll(
        self,
        view: GlobalView,
        rng: np.random.Generator,
        walker: list[Tickets],
        *,
        enrolled: int,
        needed: int,
    ) -> Agent:
        """A new agent of the experiment: with the next ticket of it that works, or with the
        shared secret if no ticket is configured at all. `walker` holds the tickets read in this
        round ([] at first): they are read once, and again only when they are used up (a file may
        have grown), not for every agent (thousands of agents, thousands of tickets). `enrolled`
        of the `needed` agents this process enrolls in the experiment have been (for the line
        saying how many tickets are missing)."""
        experiment = view.experiment
        period = self.settings.reconcile_seconds
        if not self.settings.uses_tickets:
            try:
                return Agent.enroll(
                    self.client,
                    view,
                    self.settings.enrollment_secret,
                    rng,
                    reconcile_seconds=period,
                    simulated=True,
                    lease=True,
                )
            except CoordinatorError as exc:
                if exc.status == 403:
                    raise EnrollmentLimited(exc.detail) from None
                if exc.status != 401:
                    raise
                raise EnrollmentFailed(
                    f"experiment {experiment}: the coordinator refused open enrollment ({exc}): "
                    f"give the agents tickets (`dexp tickets issue {experiment} --count N`, then "
                    "DEXP_TICKETS_FILE or DEXP_TICKETS)"
                ) from None
        configured: list[str] = []
        skipped = 0  # tickets refused for this agent: said in one line, not one each
        for fresh in (False, True):
            if fresh or not walker:  # the first read of this round, or the read ones used up
                configured = self.tickets_of(experiment)
                unspent = self.unused([t for t in configured if t not in self.spent], experiment)
                if fresh and not unspent:
                    break
                walker[:] = [Tickets(unspent)]
            tickets = walker[0]
            for position, ticket in tickets:
                try:
                    agent = Agent.enroll(
                        self.client,
                        view,
                        ticket,
                        rng,
                        reconcile_seconds=period,
                        simulated=True,
                        lease=True,
                    )
                except CoordinatorError as exc:
                    if exc.status == 403:  # the experiment is full: the ticket is still good
                        raise EnrollmentLimited(exc.detail) from None
                    if exc.status != 401:
                        raise
                    self.spent.add(ticket)
                    self.refused[experiment] += 1
                    skipped += 1
                    log.debug(  # one line per ticket only on request: a scale-up meets many
                        "ticket %d of %d (%s) refused (used, expired or unknown): trying the next",
                        position,
                        len(tickets.tickets),
                        ticket_label(ticket),
                    )
                    continue
                self.spent.add(ticket)
                if skipped:
                    log.info(
                        "experiment %s: %d ticket(s) refused (used, expired or unknown) before "
                        "one enrolled an agent",
                        experiment,
                        skipped,
                    )
                return agent
        more = f"`dexp tickets issue {experiment} --count {needed - enrolled}`"
        if not configured:
            raise EnrollmentFailed(
                f"experiment {experiment}: no ticket of it is configured (DEXP_TICKETS, "
                f"DEXP_TICKETS_FILE): issue {more} and add them there"
            )
        raise EnrollmentFailed(
            f"experiment {experiment}: out of tickets: {enrolled} of the {needed} agent(s) to "
            f"enroll got one ({len(configured)} ticket(s) of {experiment} configured, "
            f"{self.refused[experiment]} of them used, expired or unknown); issue more with "
            f"{more} and add them to DEXP_TICKETS_FILE or DEXP_TICKETS"
        )
