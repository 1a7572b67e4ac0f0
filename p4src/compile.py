"""`make p4`: compile ecn.p4 with p4c and refresh the committed artifacts and manifest."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ecntune.p4src import PROGRAM, Program, sha256

HOW_TO_GET_P4C = """p4c is not on PATH. Get it from one of:
  - the Docker image: docker compose -f docker/compose.yml run p4c make p4
  - p4lang's packages (Ubuntu): the p4lang OBS repository, package p4lang-p4c
  - a source build of p4c v1.2.4.8 (the newest tag that builds with Debian bookworm's protobuf)
"""


def p4c_command(program: Program, out_dir: Path) -> list[str]:
    return [
        "p4c",
        "--target", "bmv2",
        "--arch", "v1model",
        "--std", "p4-16",
        "-o", str(out_dir),
        "--p4runtime-files", str(out_dir / program.p4info_path.name),
        program.source.name,
    ]  # fmt: skip


def compile_into(program: Program, out_dir: Path) -> str:
    """Run p4c into out_dir; returns p4c's version line."""
    if shutil.which("p4c") is None:
        raise FileNotFoundError(HOW_TO_GET_P4C)
    # Run beside the sources so the JSON's source references hold no machine-specific path.
    subprocess.run(p4c_command(program, out_dir), check=True, cwd=program.source.parent)
    # p4c names its preprocessed output by the -o path (a temporary directory): only that
    # name differs between two compiles of the same sources, so it is written relative
    json_out = out_dir / program.json_path.name
    text = json_out.read_text()
    json_out.write_text(text.replace(f'"program" : "{out_dir}/', '"program" : "./', 1))
    version = subprocess.run(["p4c", "--version"], capture_output=True, text=True, check=True)
    return version.stdout.strip().splitlines()[-1]


def main() -> int:
    try:
        with tempfile.TemporaryDirectory() as tmp:
            version = compile_into(PROGRAM, Path(tmp))
            PROGRAM.json_path.parent.mkdir(exist_ok=True)
            for artifact in PROGRAM.artifacts():
                shutil.copyfile(Path(tmp) / artifact.name, artifact)
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"p4c failed with status {e.returncode}", file=sys.stderr)
        return 1
    manifest = {
        "p4c_version": version,
        "p4c_command": " ".join(p4c_command(PROGRAM, Path("<out>"))),
        "sha256": {p.name: sha256(p) for p in PROGRAM.sources() + PROGRAM.artifacts()},
    }
    PROGRAM.manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    print(f"compiled {PROGRAM.source.name} with {version}; manifest updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
