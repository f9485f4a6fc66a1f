"""Generates the npud.v1 Python stubs from ../../proto into src/npud/v1.

    python tools/gen_stubs.py            # regenerate in place
    python tools/gen_stubs.py --check    # fail if the committed stubs are stale

Needs grpcio-tools (the `dev` extra). The generated modules import each other as
`npud.v1.*`, so they live inside the `npud` package.
"""

import argparse
import filecmp
import pathlib
import shutil
import sys
import tempfile

from grpc_tools import protoc

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent / "src"
PROTO_ROOT = HERE.parent.parent.parent / "proto"
GENERATED = "npud/v1"


def generate(out: pathlib.Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / GENERATED).glob("*.proto"))
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}", *protos]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = pathlib.Path(tmp)
        generate(tmp_path)
        fresh = tmp_path / GENERATED
        target = PACKAGE_ROOT / GENERATED
        names = sorted(p.name for p in fresh.iterdir() if p.is_file())
        if args.check:
            stale = [n for n in names if not (target / n).exists() or not filecmp.cmp(fresh / n, target / n, shallow=False)]
            if stale:
                print(f"stale generated stubs: {', '.join(stale)}; run python tools/gen_stubs.py", file=sys.stderr)
                return 1
            return 0
        target.mkdir(parents=True, exist_ok=True)
        for n in names:
            shutil.copyfile(fresh / n, target / n)
        print(f"wrote {len(names)} files to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
