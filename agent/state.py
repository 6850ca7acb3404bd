"""What an agent process keeps on disk (DEXP_STATE_DIR) so that a restart is the same agents.

Per hosted agent: its credentials (agent id, token), the votes it decided and has not yet seen
acknowledged ("pending": written before the vote is sent), and the votes the coordinator
acknowledged (arm, epoch, outcome); under CDE, its one report (arm, and the coordinator's outcome
once it answered: written before the report is sent, so that a restart sends the same report
again and never draws another). Never a reward, a count or a local mean: those stay in the
process and a restart forgets them (the local statistics restart fresh, which is DE's own restart
rule; see agent/discovery.py, "Restarts").

One small JSON file per agent (see StateDir). The files hold bearer tokens: they are created with
mode 0600, and the directory should be private to the agent process (one directory per process, e.g.
a StatefulSet volume: two live processes must never share one). A process hosting several
experiments keeps them all in its one directory: each file names its experiment (agent ids do too),
so the layout is the same as a one-experiment process's and a directory written by one restarts
as the other.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1

# Outcomes after which the agent's id is in the arm's voter set (a "duplicate" means an earlier
# attempt of the same vote was counted, e.g. its reply was lost and the client retried). Not
# "last_arm": a vote against the identified arm is ignored.
IN_VOTER_SET = frozenset({"counted", "eliminated", "duplicate"})


@dataclass
class Acknowledged:
    arm: int
    epoch: int
    outcome: str
    # In memory only (never saved, not part of equality): when the acknowledgement arrived (see
    # GlobalView.snapshot_seq), and the arm's vote count the reply showed (None: unknown, e.g.
    # after a restart). A later public count below it, the arm still in play, means lost votes.
    seq: int = field(default=0, compare=False)
    votes: int | None = field(default=None, compare=False)

    @property
    def in_voter_set(self) -> bool:
        return self.outcome in IN_VOTER_SET


@dataclass
class AgentRecord:
    """One agent's durable part: credentials and vote bookkeeping, nothing statistical."""

    agent_id: str
    token: str
    acknowledged: list[Acknowledged] = field(default_factory=list)
    pending: list[tuple[int, int]] = field(default_factory=list)  # (arm, epoch), sent or about to
    # epoch -> when it began (unix ms, the coordinator's epoch_started_at), for the epochs of the
    # votes above: an epoch's identity with its number (a failover may lose an epoch, and a later
    # one take its number)
    epoch_starts: dict[int, int] = field(default_factory=dict)
    report: int | None = None  # CDE: the randomized report, once drawn (sent, or about to be)
    report_outcome: str | None = None  # the coordinator's answer to it (None: not seen yet)
    # LDP (agent/private_device.py): the reports the coordinator counted, and the one decided and
    # not seen answered, (arm, bit, seq): saved before it is sent, so that a restart sends that
    # same report again (a duplicate if it was counted), never privatizes the reward again.
    private_sent: int = 0
    private_pending: tuple[int, int, int] | None = None

    def forget_lost_epoch(self, epoch: int, started: int | None) -> bool:
        """The coordinator's epoch `epoch` began at `started`: if this agent's votes of an epoch of
        that number belong to another start (an epoch a failover lost), they are forgotten (never
        sent again, never counted as decided); True if any were."""
        if started is None:
            return False
        known = self.epoch_starts.get(epoch)
        self.epoch_starts = {
            e: s for e, s in self.epoch_starts.items() if e >= epoch - 1 and e != epoch
        } | {epoch: started}
        if known is None or known == started:
            return False
        self.acknowledged = [v for v in self.acknowledged if v.epoch != epoch]
        self.pending = [p for p in self.pending if p[1] != epoch]
        return True

    def decided(self, epoch: int) -> set[int]:
        """Arms this agent decided against in `epoch`: it never decides on them again."""
        return {v.arm for v in self.acknowledged if v.epoch == epoch} | {
            arm for arm, e in self.pending if e == epoch
        }

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "agent_id": self.agent_id,
            "token": self.token,
            "acknowledged": [[v.arm, v.epoch, v.outcome] for v in self.acknowledged],
            "pending": [list(p) for p in self.pending],
            "epoch_starts": {str(e): s for e, s in self.epoch_starts.items()},
        }
        if self.report is not None:  # CDE only: [arm, outcome or null]
            document["report"] = [self.report, self.report_outcome]
        if self.private_sent or self.private_pending is not None:  # LDP only
            pending = None if self.private_pending is None else list(self.private_pending)
            document["private"] = {"sent": self.private_sent, "pending": pending}
        return document

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AgentRecord:
        report = data.get("report")
        private = data.get("private") or {}
        pending = private.get("pending")
        return cls(
            str(data["agent_id"]),
            str(data["token"]),
            [Acknowledged(int(a), int(e), str(o)) for a, e, o in data.get("acknowledged", [])],
            [(int(a), int(e)) for a, e in data.get("pending", [])],
            {int(e): int(s) for e, s in data.get("epoch_starts", {}).items()},
            None if report is None else int(report[0]),
            None if report is None or report[1] is None else str(report[1]),
            int(private.get("sent", 0)),
            None if pending is None else (int(pending[0]), int(pending[1]), int(pending[2])),
        )


class StateDir:
    """The agents of one experiment in a process's directory: one small file per agent,
    `<dir>/agent-<agent id>.json`, holding the experiment's id and the agent's slot (its place
    among the process's agents of that experiment). `of` gives another experiment's agents in the
    same directory.

    A file is rewritten whole at each change (temp file, os.replace), so a crash at any instant
    leaves the old version or the new one. One file per agent keeps each write small whatever the
    number of agents a process hosts. Writes are fsynced (file and directory) when `durable`:
    always for a new agent's credentials (losing them would make a restarted process enroll a new
    agent, a second voter for the same process), and for vote records only if `fsync_votes`; a
    process crash loses nothing either way (the data is in the page cache)."""

    def __init__(self, directory: str | Path, experiment: str, fsync_votes: bool = False) -> None:
        self.dir = Path(directory)
        self.experiment = experiment
        self.fsync_votes = fsync_votes
        self.writes = 0
        self._lock: Any = None

    def of(self, experiment: str) -> StateDir:
        """The same directory, for another experiment's agents (the lock stays with this one)."""
        return StateDir(self.dir, experiment, self.fsync_votes)

    def close(self) -> None:
        """Release the lock (a process releases it by ending; a service run in a thread cannot)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def lock(self) -> None:
        """Hold the directory for this process's lifetime (an exclusive flock, released by the
        kernel however the process ends): two live processes on one directory would host the same
        agents twice."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = hold(self.dir / ".lock", f"{self.dir} is in use by another agent process")

    def path(self, agent_id: str) -> Path:
        return self.dir / f"agent-{agent_id}.json"

    def forget(self, agent_id: str) -> None:
        """The agent left its experiment: a restart must not restore it (its token is dead)."""
        self.path(agent_id).unlink(missing_ok=True)

    def load(self, created_at: int) -> list[AgentRecord]:
        """The saved agents of this incarnation of the experiment (same creation time: an
        experiment deleted and created again has other agents), in their slot order."""
        records: list[tuple[int, AgentRecord]] = []
        for path in sorted(self.dir.glob("agent-*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # not one of ours (temp files start with a dot)
            if (
                data.get("format") == FORMAT
                and data.get("experiment") == self.experiment
                and int(data.get("created_at", -1)) == created_at
            ):
                records.append((int(data.get("slot", 0)), AgentRecord.from_json(data)))
        return [r for _, r in sorted(records, key=lambda item: item[0])]

    def save(
        self, record: AgentRecord, created_at: int, slot: int, durable: bool | None = None
    ) -> None:
        document = {
            "format": FORMAT,
            "experiment": self.experiment,
            "created_at": created_at,
            "slot": slot,
            **record.to_json(),
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        write_atomically(
            self.path(record.agent_id),
            document,
            self.fsync_votes if durable is None else durable,
        )
        self.writes += 1


def hold(path: Path, in_use: str) -> Any:
    """An exclusive flock on `path` (created if missing), held until the returned file is closed
    or the process ends, however it ends; RuntimeError(`in_use`) if another process holds it."""
    lock = open(path, "a")  # noqa: SIM115 - held until closed
    try:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise RuntimeError(in_use) from None
    return lock


def write_atomically(target: Path, document: dict[str, Any], fsync: bool) -> None:
    """Write `document` as `target` whole (a temp file of mode 0600 beside it, then os.replace),
    so that a crash at any instant leaves the old version or the new one; `fsync`: the file and
    its directory too, so that a power loss does as well."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)  # mode 0600
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(document, out, separators=(",", ":"))
            if fsync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (a power loss, not only a process crash)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


class StateFile:
    """One agent in one file: what a device keeps (agent/device.py). The document is a StateDir
    file's (format, experiment, creation time of the experiment, agent id, token, votes) without
    the slot. `<file>.lock` beside it is held while the agent runs: two live processes on one
    file would be one agent acting twice. Every write is fsynced: a device writes a few times
    per experiment (its enrollment and its votes, at most K - 1 per epoch)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock: Any = None

    def lock(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        self._lock = hold(lock_path, f"{self.path} is in use by another running agent")

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def load(self) -> tuple[str, int, AgentRecord] | None:
        """(experiment, its creation time, the agent's record), or None if there is no file.
        ValueError if the file is not one of ours: it is left as it is, never overwritten."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            return str(data["experiment"]), int(data["created_at"]), AgentRecord.from_json(data)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{self.path} is not an agent's state file ({exc})") from None

    def save(self, experiment: str, created_at: int, record: AgentRecord) -> None:
        document = {
            "format": FORMAT,
            "experiment": experiment,
            "created_at": created_at,
            **record.to_json(),
        }
        write_atomically(self.path, document, fsync=True)
