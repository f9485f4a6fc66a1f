"""An unmodified PyTorch program for the hardware check: it fills torch's stream pool
(torch.cuda.Stream() draws from it; the first use creates the whole pool through cudart,
which reaches the driver through cuGetProcAddress), runs a matrix product on a side stream,
then holds for HOLD seconds so npud's status can be read while it holds.

    python3 torch_streams.py HOLD

Prints "ok <checksum>" or "fail <exception>" (exit 1)."""

import sys
import time

import torch


def main() -> int:
    hold = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    try:
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            a = torch.ones(1024, 1024, device="cuda")
            b = a @ a
        side.synchronize()
        checksum = float(b[0, 0])
    except Exception as e:  # noqa: BLE001 - the line the check reads
        print(f"fail {type(e).__name__}: {e}".splitlines()[0], flush=True)
        return 1
    print(f"ok {checksum:.0f}", flush=True)
    time.sleep(hold)
    return 0


if __name__ == "__main__":
    sys.exit(main())
