"""A worker process of the web server (`python -m gpuplan.web.worker`, started by web/pool.py).

It reads jobs on stdin and writes answers on stdout, one frame each, until stdin closes:

    job:    4-byte length, then JSON [kind, body]
    answer: struct "!HQI" (HTTP status, this process's resident bytes, payload length), payload

The payload is the JSON answer of web/compute.py's `handle`, which never raises. Ctrl+C in the
terminal is the server's to handle: it ends its workers itself.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
from typing import IO

JOB = struct.Struct("!I")
ANSWER = struct.Struct("!HQI")


def rss_bytes() -> int:
    """This process's resident memory (Linux /proc; elsewhere the peak from getrusage)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        try:
            import resource

            peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            return peak if sys.platform == "darwin" else peak * 1024
        except (ImportError, OSError):
            return 0


def read_exactly(stream: IO[bytes], n: int) -> bytes | None:
    """n bytes from `stream`, or None at its end."""
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from gpuplan.web.compute import handle

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = read_exactly(stdin, JOB.size)
        job = read_exactly(stdin, JOB.unpack(head)[0]) if head else None
        if job is None:
            return
        kind, body = json.loads(job)
        status, answer = handle(kind, body)
        try:
            payload = json.dumps(answer, allow_nan=False).encode()
        except ValueError:  # inf/nan in an answer is a bug: say so rather than send bad JSON
            status, payload = 500, b'{"detail": "internal error (a non-finite number)"}'
        try:
            stdout.write(ANSWER.pack(status, rss_bytes(), len(payload)) + payload)
            stdout.flush()
        except (BrokenPipeError, OSError):
            return


if __name__ == "__main__":
    main()
