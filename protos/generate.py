"""Regenerates protos/cni_pb2.py, cni_pb2.pyi and cni_pb2_grpc.py from protos/cni.proto.

Run `python -m protos.generate` from the repository root; `--check` exits 1 when the committed
files differ from what the .proto generates (CI runs it so the two never drift).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = ("cni_pb2.py", "cni_pb2.pyi", "cni_pb2_grpc.py")


def generate(out_dir: Path) -> None:
    args = [
        "protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        str(ROOT / "protos" / "cni.proto"),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main(argv: list[str]) -> int:
    if "--check" in argv:
        with tempfile.TemporaryDirectory() as tmp:
            generate(Path(tmp))
            stale = [
                name
                for name in OUTPUTS
                if (Path(tmp) / "protos" / name).read_bytes()
                != (ROOT / "protos" / name).read_bytes()
            ]
        if stale:
            print(f"generated code is stale, run `python -m protos.generate`: {stale}")
            return 1
        print("generated code matches protos/cni.proto")
        return 0
    generate(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
