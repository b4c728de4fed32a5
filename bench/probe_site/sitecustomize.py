"""A diagnostic probe inside the operator that bench/operator_scale.py starts (bench/heap_probe.py).

Python imports ``sitecustomize`` at start from ``PYTHONPATH``; with ``PROBE_OUT`` set, an
``ascend-llm operator run`` process then times every collection of the cycle collector
(``gc.callbacks``, wall clock inside the collector), counts full passes and watch events by
kind and type, and every 10 s appends one JSON line to ``PROBE_OUT`` with those totals and each
thread's CPU ticks (``/proc/self/task``). Other processes import it and do nothing.
"""

import os
import sys

if "operator" in sys.argv and "run" in sys.argv and os.environ.get("PROBE_OUT"):
    import collections
    import gc
    import json
    import threading
    import time

    _out = os.environ["PROBE_OUT"]
    _gc = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
    _started = [0.0]
    _counts: collections.Counter = collections.Counter()

    def _timed(phase, info):
        if phase == "start":
            _started[0] = time.perf_counter()
        else:
            entry = _gc[info["generation"]]
            entry[0] += 1
            entry[1] += time.perf_counter() - _started[0]

    gc.callbacks.append(_timed)

    def _threads():
        names = {t.native_id: t.name for t in threading.enumerate()}
        ticks = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            ticks[tid] = [names.get(int(tid), "?"), int(fields[11]) + int(fields[12])]  # utime + stime
        return ticks

    def _count_calls():
        from ascend_operator.handlers import handle_events, handle_reconcile

        reconcile, child_event = handle_reconcile.reconcile, handle_events.child_event

        async def counted_reconcile(*args, **kwargs):
            _counts["full passes"] += 1
            return await reconcile(*args, **kwargs)

        def counted_event(ctx, event_type, body):
            _counts[f"event {body.get('kind')} {event_type}"] += 1
            return child_event(ctx, event_type, body)

        handle_reconcile.reconcile, handle_events.child_event = counted_reconcile, counted_event

    def _record_forever():
        counting = False
        while True:
            time.sleep(10)
            try:
                if not counting and "ascend_operator.handlers.handle_events" in sys.modules:
                    _count_calls()
                    counting = True
                line = {"t": time.time(), "gc": _gc, "frozen": gc.get_freeze_count(), "counts": dict(_counts),
                        "ticks_per_s": os.sysconf("SC_CLK_TCK"), "threads": _threads()}
                with open(_out, "a") as out:
                    out.write(json.dumps(line) + "\n")
            except Exception as error:  # the probe never stops the operator
                with open(_out + ".err", "a") as out:
                    out.write(f"{error!r}\n")

    threading.Thread(target=_record_forever, daemon=True, name="probe").start()
