"""A bounded client loop for the real-node tier: chat completions one after another to URL, one
JSON line per request (start time, seconds, HTTP status or the error), until STOP_FILE exists or
MAX_S pass. Run inside the node's network namespace (``nsenter -n``): Service IPs exist only there.

Usage: client_loop.py URL MODEL OUT_FILE STOP_FILE MAX_S
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

#: Seconds one request may take; a draining pod still answers within its shutdown timeout.
REQUEST_TIMEOUT_S = 60


def main(url: str, model: str, out: str, stop: str, max_s: str) -> None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    deadline = time.monotonic() + float(max_s)
    with open(out, "a", encoding="utf-8") as sink:
        while time.monotonic() < deadline and not Path(stop).exists():
            started = time.time()
            record: dict[str, object] = {"t": started}
            request = urllib.request.Request(url, body, {"content-type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as response:
                    record["status"] = response.status
                    response.read()
            except urllib.error.HTTPError as error:
                record["status"] = error.code
                record["error"] = error.read()[:300].decode(errors="replace")
            except (OSError, TimeoutError) as error:  # refused, reset, unreachable, timed out
                record["status"] = 0
                record["error"] = f"{error.__class__.__name__}: {error}"
            record["s"] = round(time.time() - started, 3)
            sink.write(json.dumps(record) + "\n")
            sink.flush()


if __name__ == "__main__":
    main(*sys.argv[1:6])
