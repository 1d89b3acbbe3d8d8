"""An alter.config.policy.class.name for the tests: topics may not retain data under 1 s."""

from __future__ import annotations

from typing import Any


class MinimumRetentionPolicy:
    def validate(self, request: Any) -> None:
        retention = request.configs.get("retention.ms")
        if request.resource_type == "TOPIC" and retention is not None and int(retention) < 1000:
            raise ValueError(f"retention.ms {retention} is under the 1000 ms minimum")
