"""The P4 program (ecn.p4), its committed p4c artifacts in build/, and their manifest.

p4c is not installable from the registries CI reaches, so its output for our program is
committed: build/ecn.json (BMv2 JSON) and build/ecn.p4info.txtpb (P4Info), with
build/manifest.json recording the sha256 of every source and artifact and the p4c version.
`make p4` regenerates them where p4c exists; tests fail when sources and artifacts disagree.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
BUILD_DIR = SOURCE_DIR / "build"


@dataclass(frozen=True)
class Program:
    name: str
    source: Path
    json_path: Path
    p4info_path: Path
    manifest_path: Path

    def sources(self) -> list[Path]:
        return sorted(SOURCE_DIR.glob("*.p4"))

    def artifacts(self) -> list[Path]:
        return [self.json_path, self.p4info_path]

    def manifest(self) -> dict:
        return json.loads(self.manifest_path.read_text())

    def constants(self) -> dict[str, int]:
        """The sources' numeric `const bit<N> NAME = V;`, for checks that the Python side
        counts with the same numbers as the data plane."""
        text = "".join(p.read_text() for p in self.sources())
        found = re.finditer(r"const bit<\d+>\s+(\w+)\s*=\s*(\w+);", text)
        return {m[1]: int(m[2], 0) for m in found}

    def stale(self) -> list[str]:
        """Why the committed artifacts do not match the sources (empty when they do)."""
        if not self.manifest_path.exists():
            return [f"{self.manifest_path.name} is missing: run `make p4`"]
        recorded = self.manifest()["sha256"]
        current = {p.name: sha256(p) for p in self.sources() + self.artifacts() if p.exists()}
        problems = [f"{n}: not in the manifest" for n in current.keys() - recorded.keys()]
        problems += [f"{n}: recorded but missing" for n in recorded.keys() - current.keys()]
        problems += [
            f"{n}: changed since the artifacts were built"
            for n in current.keys() & recorded.keys()
            if current[n] != recorded[n]
        ]
        return sorted(problems)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


PROGRAM = Program(
    name="ecn",
    source=SOURCE_DIR / "ecn.p4",
    json_path=BUILD_DIR / "ecn.json",
    p4info_path=BUILD_DIR / "ecn.p4info.txtpb",
    manifest_path=BUILD_DIR / "manifest.json",
)
