"""The control plane's floor under bench/operator_scale.py's converge: how fast the API server
makes Services, those with a ClusterIP beside headless ones, side by side in one run.

Run:  python bench/service_alloc.py [--count 10000] [--workers 64] [--per-namespace 100] [--out FILE]
      python bench/service_alloc.py --reread FILE

kube-apiserver (1.33 and later, the pack's 1.36 included) gives a Service its ClusterIP by creating
an IPAddress object while it holds one lock for the whole cluster, and inside that lock it counts
every IPAddress twice for its metrics (a List of its informer's cache with a label match each:
``pkg/registry/core/service/ipallocator``, ``createIPAddress`` -> ``Used()`` / ``Free()``). Services
with a ClusterIP are made one at a time, each slower than the last: n Services cost the API server
O(n^2). Every operator that gives each resource a ClusterIP Service pays it (bench/operator_scale.py's
``minimal-same`` operator applies the same Services as the project's).

For each kind (``clusterip``, ``headless``) a fresh control plane of the pack is started, ``--count``
Services are created by ``--workers`` threads (an operator's concurrent reconciles) in namespaces of
``--per-namespace``, and the seconds each thousand took are reported; the growth is the whole
time against the first thousand's times count/1000 (1.0: linear). The plane is stopped however the
run ends. Exit 0 when it ran, 1 when a kind could not be measured, 2 for a --reread file that is
not a saved report. The pure part is tested by tests/unit/test_service_alloc_bench.py.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from operator_scale import (  # noqa: E402
    ROOT, Api, ApiError, ControlPlane, git_commit, log, plane_cpu_s, plane_stopped_at_exit, reread,
)

KINDS = ("clusterip", "headless")
#: Services counted per row of the report.
BLOCK = 1000


def service_body(name: str, kind: str) -> dict[str, Any]:
    """One Service like an operator's: a port to a selector; ``headless``: ``clusterIP: None``."""

    spec: dict[str, Any] = {"selector": {"app": name}, "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]}
    if kind == "headless":
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}


def blocks(done_at: Sequence[float], start: float, block: int = BLOCK) -> list[float]:
    """The seconds each ``block`` of completions took, in order of completion (a last partial
    block included): from ``start`` to the first block's last, then from one block's last to the next's."""

    times = sorted(done_at)
    ends = [times[index] for index in range(block - 1, len(times), block)]
    if times and len(times) % block:
        ends.append(times[-1])
    out, previous = [], start
    for end in ends:
        out.append(round(end - previous, 2))
        previous = end
    return out


def growth(block_s: Sequence[float], count: int, block: int = BLOCK) -> float | None:
    """The whole time against the first block's scaled to ``count`` (1.0: each block as fast as
    the first); None with fewer than two blocks."""

    if len(block_s) < 2 or block_s[0] <= 0:
        return None
    return round(sum(block_s) / (block_s[0] * count / block), 2)


def measure(api: Api, kind: str, count: int, workers: int, per_namespace: int,
            run_dir: Path | None) -> dict[str, Any]:
    """Create ``count`` Services of ``kind``; the seconds per block and the plane's CPU."""

    namespaces = [f"alloc-{kind}-{index:03d}" for index in range(-(-count // per_namespace))]
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda ns: api.request("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, ok=(201, 409)), namespaces))
    done_at: list[float] = []
    errors: list[str] = []

    def create(index: int) -> None:
        namespace = namespaces[index // per_namespace]
        try:
            api.request("POST", f"/api/v1/namespaces/{namespace}/services",
                        service_body(f"svc-{index:05d}", kind), timeout=300)
            done_at.append(time.monotonic())
        except (ApiError, OSError) as error:
            errors.append(str(error)[:300])

    cpu_before = plane_cpu_s(run_dir)
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        list(pool.map(create, range(count)))
    wall = time.monotonic() - start
    cpu = {name: round(seconds - cpu_before[name], 1) for name, seconds in plane_cpu_s(run_dir).items()
           if name in cpu_before}
    block_s = blocks(done_at, start)
    return {"kind": kind, "count": count, "created": len(done_at), "wallS": round(wall, 2), "blockS": block_s,
            "growth": growth(block_s, count) if not errors else None, "planeCpuS": cpu,
            "errors": errors[:5], "errorCount": len(errors)}


def format_report(report: Mapping[str, Any]) -> str:
    lines = [f"{report['count']} Services by {report['workers']} threads, {report['perNamespace']} to a namespace, "
             f"a fresh control plane per kind (commit {report.get('commit') or '-'}, {report.get('cpus')} CPUs):", ""]
    lines.append("| kind | created | seconds | growth (1.0 = linear) | seconds per thousand, in order | "
                 "API server CPU (s) |")
    lines.append("|---|---|---|---|---|---|")
    for cell in report["kinds"]:
        growth_cell = "-" if cell["growth"] is None else f"{cell['growth']:.2f}x"
        per_block = ", ".join(f"{seconds:.1f}" for seconds in cell["blockS"]) or "-"
        api_cpu = cell.get("planeCpuS", {}).get("kube-apiserver")
        lines.append(f"| {cell['kind']} | {cell['created']} | {cell['wallS']:.1f} | {growth_cell} | {per_block} | "
                     f"{'-' if api_cpu is None else f'{api_cpu:.1f}'} |")
        if cell.get("errorCount"):
            lines.append(f"|  | {cell['errorCount']} refused, first: {cell['errors'][0]} |  |  |  |  |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10000, help="Services per kind (default %(default)s).")
    parser.add_argument("--workers", type=int, default=64,
                        help="Threads creating them (default %(default)s: the operator's concurrent reconciles).")
    parser.add_argument("--per-namespace", type=int, default=100, help="Services to a namespace (default %(default)s).")
    parser.add_argument("--kinds", default=",".join(KINDS), help="Which kinds, in order (default %(default)s).")
    parser.add_argument("--pack", type=Path,
                        default=Path(os.environ.get("ASCEND_LLM_K8S_PACK") or ROOT.parent / "shared" / "k8s"),
                        help="The control-plane pack (default ../shared/k8s or ASCEND_LLM_K8S_PACK).")
    parser.add_argument("--workdir", type=Path,
                        default=Path(os.environ.get("ASCEND_LLM_K8S_WORKDIR") or ROOT / ".cache" / "k8s"),
                        help="Its WORKDIR (default .cache/k8s or ASCEND_LLM_K8S_WORKDIR); wiped per kind.")
    parser.add_argument("--port-base", default=os.environ.get("ASCEND_LLM_K8S_PORT_BASE", "20000"),
                        help="Its --port-base (default 20000 or ASCEND_LLM_K8S_PORT_BASE).")
    parser.add_argument("--out", type=Path, default=None, help="Write the results as JSON here.")
    parser.add_argument("--reread", type=Path, default=None, metavar="FILE",
                        help="Print the table of a saved --out JSON again, and run nothing.")
    args = parser.parse_args(argv)
    args.kinds = [kind.strip() for kind in args.kinds.split(",") if kind.strip()]
    if not args.kinds or any(kind not in KINDS for kind in args.kinds):
        parser.error(f"--kinds: choose from {', '.join(KINDS)}")
    if args.count < 1 or args.workers < 1 or args.per_namespace < 1:
        parser.error("--count, --workers and --per-namespace must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reread is not None:
        return reread("service_alloc", args.reread, format_report)
    report: dict[str, Any] = {"count": args.count, "workers": args.workers, "perNamespace": args.per_namespace,
                              "commit": git_commit(), "cpus": os.cpu_count(), "python": platform.python_version(),
                              "kinds": []}
    failed = False
    with plane_stopped_at_exit(ControlPlane(args.pack, args.workdir, args.port_base), "service_alloc") as plane:
        for kind in args.kinds:
            log(f"{kind}: starting a fresh control plane")
            try:
                kubeconfig = plane.start(wipe=True)
                cell = measure(Api(kubeconfig, args.workers), kind, args.count, args.workers, args.per_namespace,
                               args.workdir / "run")
            except Exception as error:  # noqa: BLE001 - reported; the next kind still runs
                log(f"{kind}: not measured: {error!r}")
                failed = True
                continue
            finally:
                plane.stop()
            report["kinds"].append(cell)
            log(f"{kind}: {cell['created']} in {cell['wallS']} s, growth {cell['growth']}")
    print(format_report(report))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 1 if failed or not report["kinds"] else 0


if __name__ == "__main__":
    sys.exit(main())
