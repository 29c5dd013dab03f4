"""Regenerates the Python code of the project's .proto files: protos/cni.proto (the agent's
contract) and tests/runtimes/cri/api.proto (the CRI subset the runtime tests speak to containerd).

Run `python -m protos.generate` from the repository root; `--check` exits 1 when the committed
files differ from what the .proto generates (CI runs it so the two never drift).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ("protos/cni.proto", "tests/runtimes/cri/api.proto")
OUTPUTS = tuple(
    proto.removesuffix(".proto") + suffix
    for proto in PROTOS
    for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
)


def generate(out_dir: Path) -> None:
    for proto in PROTOS:
        args = [
            "protoc",
            f"-I{ROOT}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            str(ROOT / proto),
        ]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")


def main(argv: list[str]) -> int:
    if "--check" in argv:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            stale = [
                name
                for name in OUTPUTS
                if (Path(tmp) / name).read_bytes() != (ROOT / name).read_bytes()
            ]
        if stale:
            print(f"generated code is stale, run `python -m protos.generate`: {stale}")
            return 1
        print(f"generated code matches {', '.join(PROTOS)}")
        return 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
