"""Webhooks of an experiment: POST (the secret, once), GET (with their deliveries), DELETE.

An operator key (or the admin token), checked by the same dependency (and gate entry) as the other operator routes, so
that whatever replaces it covers these routes too. What gets sent, when and how it is signed:
coordinator/webhooks/ and docs/WEBHOOKS.md."""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Request, status
from pydantic import BaseModel, ConfigDict, Field

from coordinator.api.deps import OperatorDep, SettingsDep, StoreDep, problems
from coordinator.errors import Invalid, NotFound
from coordinator.webhooks import targets
from coordinator.webhooks.records import Webhook, WebhookRecords
from coordinator.webhooks.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, new_secret

router = APIRouter(prefix="/v1/experiments", tags=["webhooks"])

ExperimentId = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="experiment id", examples=["demo"])
]
WebhookId = Annotated[
    str, Path(pattern=r"^wh_[0-9a-f]{16}$", description="a webhook id (POST's answer)")
]


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    url: str = Field(
        max_length=2048,
        pattern=r"^https?://\S+$",
        description="http(s) URL the decisions and resets are POSTed to; its host must be "
        "allowed by DEXP_WEBHOOK_HOSTS (private addresses are refused unless listed)",
        examples=["https://hooks.example.com/dexp"],
    )


class WebhookCreated(BaseModel):
    id: str
    url: str
    created_at: int = Field(description="unix ms")
    secret: str = Field(
        description="the HMAC-SHA256 key of the signatures, shown this once (kept by the "
        "coordinator: it signs with it)"
    )
    signature_header: str = SIGNATURE_HEADER
    timestamp_header: str = TIMESTAMP_HEADER


class Delivery(BaseModel):
    id: str
    event: Literal["identified", "tied", "reset"]
    status: Literal["pending", "delivered", "failed"]
    attempts: int
    created_at: int
    last_attempt_at: int | None = None
    delivered_at: int | None = None
    last_status: int | None = Field(None, description="the HTTP status of the last answer")
    last_error: str | None = None
    next_retry_at: int | None = Field(None, description="unix ms, while pending")


class WebhookListed(BaseModel):
    id: str
    url: str
    created_at: int
    deliveries: list[Delivery]


class WebhookList(BaseModel):
    experiment: str
    webhooks: list[WebhookListed]


class TooMany(Invalid):
    """Beyond DEXP_MAX_WEBHOOKS: 409, as a conflict with the webhooks the experiment has."""

    status = 409


def records_of(request: Request) -> WebhookRecords:
    records: WebhookRecords = request.app.state.webhook_records
    return records


def delivery_of(delivery_id: str, raw: dict[str, Any]) -> Delivery:
    pending = raw.get("status") == "pending"
    return Delivery(
        id=delivery_id,
        event=raw["event"],
        status=raw["status"],
        attempts=raw.get("attempts", 0),
        created_at=raw.get("created_at", 0),
        last_attempt_at=raw.get("last_attempt_at"),
        delivered_at=raw.get("delivered_at"),
        last_status=raw.get("last_status"),
        last_error=raw.get("last_error"),
        next_retry_at=raw.get("next_at") if pending else None,
    )


@router.post(
    "/{experiment}/webhooks",
    status_code=status.HTTP_201_CREATED,
    response_model=WebhookCreated,
    dependencies=[OperatorDep],
    responses=problems(
        401,
        404,
        409,
        422,
        s409="the experiment has DEXP_MAX_WEBHOOKS webhooks already",
        s422="not an http(s) URL, or one with credentials or a fragment, or whose host does not "
        "resolve or resolves to an address DEXP_WEBHOOK_HOSTS does not allow (loopback, "
        "link-local, private and reserved addresses are refused unless listed)",
    ),
)
async def create_webhook(
    experiment: ExperimentId,
    body: WebhookCreate,
    request: Request,
    store: StoreDep,
    settings: SettingsDep,
) -> WebhookCreated:
    """Admin token. From now on, each decision (identified, tied) and each reset of the experiment
    is POSTed to `url`, signed with the `secret` of this answer (docs/WEBHOOKS.md)."""
    await targets.check(body.url, targets.AllowedHosts.parse(settings.webhook_hosts))
    state = await store.get_with_status(experiment)
    webhook = Webhook(
        id=f"wh_{secrets.token_hex(8)}",
        url=body.url,
        secret=new_secret(),
        created_at=int(time.time() * 1000),
        experiment_created_at=state.created_at,
        since_epoch=state.epoch,
        since_decision=str((state.result or {}).get("key", "")),
    )
    code = await records_of(request).add(experiment, webhook, settings.max_webhooks)
    if code == -1:
        raise NotFound(f"experiment {experiment!r} not found")
    if code == -2:
        raise TooMany(
            f"experiment {experiment!r} has {settings.max_webhooks} webhooks "
            "(DEXP_MAX_WEBHOOKS): delete one first"
        )
    return WebhookCreated(
        id=webhook.id, url=webhook.url, created_at=webhook.created_at, secret=webhook.secret
    )


@router.get(
    "/{experiment}/webhooks",
    response_model=WebhookList,
    dependencies=[OperatorDep],
    responses=problems(401, 404, 422),
)
async def list_webhooks(experiment: ExperimentId, request: Request, store: StoreDep) -> WebhookList:
    """Admin token. The experiment's webhooks (never their secrets), each with its deliveries,
    newest first: status, attempts, last error, next retry."""
    if not await store.exists(experiment):
        raise NotFound(f"experiment {experiment!r} not found")
    records = records_of(request)
    hooks = await records.webhooks(experiment)
    deliveries = await records.deliveries(experiment)
    listed = []
    for hook in sorted(hooks.values(), key=lambda h: h.created_at):
        mine = [delivery_of(i, d) for i, d in deliveries.items() if d.get("webhook") == hook.id]
        mine.sort(key=lambda d: d.created_at, reverse=True)
        listed.append(WebhookListed(**hook.public(), deliveries=mine))
    return WebhookList(experiment=experiment, webhooks=listed)


@router.delete(
    "/{experiment}/webhooks/{webhook_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[OperatorDep],
    responses=problems(401, 404, 422, s404="no such experiment or webhook"),
)
async def delete_webhook(experiment: ExperimentId, webhook_id: WebhookId, request: Request) -> None:
    """Admin token. The webhook and its deliveries go; nothing more is sent to it."""
    records = records_of(request)
    if not await records.remove(experiment, webhook_id):
        raise NotFound(f"webhook {webhook_id!r} of experiment {experiment!r} not found")
    await records.unwatch_if_empty(experiment)
