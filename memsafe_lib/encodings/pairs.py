"""One Stage A input: a query (optionally followed by the bridge unit u_top) and a unit."""

from __future__ import annotations

from dataclasses import dataclass

BRIDGE_SEPARATOR = " [SEP] "
"""Between the query and the bridge unit in a bridge pair's first text (q ‖ u_top)."""


@dataclass(frozen=True)
class Pair:
    """One encoder input: the query (optionally followed by the bridge unit) and a unit."""

    query: str
    unit: str
    bridge: str | None = None

    def first(self) -> str:
        return self.query if self.bridge is None else f"{self.query}{BRIDGE_SEPARATOR}{self.bridge}"
