"""Input of the `asset_locations` example (`conf/examples/asset_locations.yaml`): assets placed in
locations, locations moved between assets, and full publishes of the system of record.

An `AssetFleet` is that system of record: where each asset is, as the events it wrote say. Every
file of moves holds whole moves (a location removed from one asset and added to another, at the
same event time), so after any batch of whole files the view holds as many locations as were
placed. Event times rise by one second per event, from `DEFAULT_START`; files are aged so the file
source reads them in the order they were written.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from synthetic.generator import DEFAULT_START
from synthetic.scenarios import write_json_lines

CHANGES = "asset_changes"
PUBLISHES = "asset_publishes"


@dataclass
class AssetFleet:
    """Where each asset is, and the clock and counter of the events written so far."""

    landing_root: Path
    locations: dict[str, set[str]] = field(default_factory=dict)
    clock: datetime = DEFAULT_START
    events: int = 0
    files: int = 0

    def place(self, assets: int, per_asset: int, seed: int) -> Path:
        """One file placing `per_asset` distinct locations on each of `assets` assets."""
        rng = random.Random(seed)
        pool = [f"pop-{n:03d}" for n in range(assets * per_asset)]
        lines = []
        for n in range(assets):
            asset = f"asset-{n:03d}"
            for location in rng.sample(pool, per_asset):
                lines.append(self._change(asset, location, "add"))
        return self._write(CHANGES, lines)

    def move(self, moves: int, seed: int) -> Path:
        """One file of `moves` moves, each a location taken from one asset and given to another."""
        rng = random.Random(seed)
        lines = []
        for _ in range(moves):
            source = rng.choice(sorted(asset for asset, held in self.locations.items() if held))
            location = rng.choice(sorted(self.locations[source]))
            target = rng.choice(sorted(a for a, held in self.locations.items() if location not in held))
            lines.append(self._change(source, location, "remove", tick=False))
            lines.append(self._change(target, location, "add"))
        return self._write(CHANGES, lines)

    def full_publish(self, overrides: dict[str, set[str]] | None = None) -> Path:
        """One file re-emitting every asset's whole set of locations (the system of record's full
        publish); `overrides` replace some assets' sets first, as a correction the view has missed."""
        self.locations.update(overrides or {})
        lines = []
        for asset in sorted(self.locations):
            lines.append(self._line(asset, locations=",".join(sorted(self.locations[asset]))))
        return self._write(PUBLISHES, lines)

    def view(self) -> dict[str, list[str]]:
        """The view a clean run publishes: every asset holding a location, its sorted locations."""
        return {asset: sorted(held) for asset, held in sorted(self.locations.items()) if held}

    def _change(self, asset: str, location: str, action: str, tick: bool = True) -> str:
        held = self.locations.setdefault(asset, set())
        if action == "add":
            held.add(location)
        else:
            held.discard(location)
        return self._line(asset, tick=tick, location=location, action=action)

    def _line(self, asset: str, tick: bool = True, **fields: str) -> str:
        self.events += 1
        line = json.dumps(
            {
                "event_id": f"e{self.events:07d}",
                "event_time": self.clock.isoformat(),
                "asset_id": asset,
                **fields,
            }
        )
        if tick:
            self.clock += timedelta(seconds=1)
        return line

    def _write(self, source: str, lines: list[str]) -> Path:
        self.files += 1
        # Older files are read first: each file is aged a second less than the one before it.
        return write_json_lines(
            self.landing_root / source, f"{self.files:05d}.json", lines, age_seconds=1000.0 - self.files
        )
