import gc, time, threading, logging, sys
_t = {}
_acc = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}
def _cb(phase, info):
    if phase == "start":
        _t["s"] = time.perf_counter()
    else:
        a = _acc[info["generation"]]; a[0] += 1; a[1] += time.perf_counter() - _t.get("s", time.perf_counter())
gc.callbacks.append(_cb)
def _report():
    while True:
        time.sleep(5)
        logging.getLogger("gcinst").warning("gcinst %s counts=%s thr=%s", {g: (c, round(s, 3)) for g, (c, s) in _acc.items()}, gc.get_count(), gc.get_threshold())
threading.Thread(target=_report, daemon=True).start()
