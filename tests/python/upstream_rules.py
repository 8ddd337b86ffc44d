"""Upstream msMemScope's offline analyzers' rules, restated in our own words
(never its code) so that tests can check that upstream's tools, given our
dumps, find what our analyzers find (issue #20 item 6).

Sources read: upstream python/msmemscope/analyzer/inefficient.py
(InefficientAnalyzer) and python/msmemscope/analyzer/leaks.py (LeaksAnalyzer).
Both read memscope_dump rows as written, in ID order.
"""
from collections import defaultdict

KINDS = ("early_allocation", "late_deallocation", "temporary_idleness")


def _loose_attr(text):
    """Attr as upstream's inefficient reader splits it: strip the braces,
    split on every ',' and keep the pieces that have a ':' (so a value with
    a comma, e.g. a shape, is cut; allocation_id/size/type survive)."""
    text = text.strip()
    if not text:
        return {}
    out = {}
    for piece in text[1:-1].split(","):
        key, sep, value = piece.strip().partition(":")
        if sep:
            out[key.strip().strip('"')] = value.strip().strip('"')
    return out


class _Group:
    """One process's framework group (PTA or ATB): the API counter."""

    def __init__(self):
        self.api = 0
        self.in_op = False
        self.pending = []          # events of the API still open
        self.alloc_api = None      # the latest closed API that had a MALLOC
        self.free_api = None       # ... that had a FREE

    def close(self):
        if any(e["event"] == "MALLOC" for e in self.pending):
            self.alloc_api = self.api
        if any(e["event"] == "FREE" for e in self.pending):
            self.free_api = self.api
        self.pending = []


def inefficient_findings(rows, mem_size=0, kinds=KINDS, idle_threshold=3000):
    """{ID of the MALLOC row: [kinds in the order found]} by upstream's
    inefficient rule, for rows (dicts with the memscope_dump columns).

    The rule: an API is one operator (OP_LAUNCH ATEN_START..ATEN_END, or
    ATB_START..ATB_END for the ATB group); a MALLOC/FREE (pools PTA, ATB)
    or an ACCESS outside an operator is an API by itself. Events belong to a
    block by (process, Attr allocation_id); a block whose first event is not
    its MALLOC is not judged. Then:
      temporary_idleness  an ACCESS whose previous event of the block was an
                          ACCESS more than idle_threshold APIs earlier;
      early_allocation    (at an ACCESS, once some API freed) the latest
                          freeing API lies strictly between the block's
                          MALLOC API and its first ACCESS in another API;
      late_deallocation   (at a FREE, once some API allocated) the event
                          before it was an ACCESS in another API, and the
                          latest allocating API lies strictly between that
                          ACCESS's API and the FREE's.
    The mark goes on the block's MALLOC row, if its size >= mem_size.
    Rows with Attr shadow:true (a block there when collection started, one
    still live at its end) are skipped, as upstream's live analyzer skips
    shadow events (csrc/analysis/inefficient_analyzer.cpp EventHandle); its
    offline reader does not, and would judge a weight still live at stop()
    late_deallocation at its end-of-dump FREE.
    """
    groups = defaultdict(_Group)     # (pid, "PTA"|"ATB")
    history = defaultdict(list)      # (pid, allocation_id) -> the block's events
    found = defaultdict(list)

    def mark(first, kind):
        if kind in kinds and first["size"] >= mem_size and kind not in found[first["id"]]:
            found[first["id"]].append(kind)

    for r in sorted(rows, key=lambda r: int(r["ID"])):
        ev, typ, pid = r["Event"], r["Event Type"], r["Process Id"]
        if ev == "OP_LAUNCH":
            g = groups[(pid, "PTA" if typ in ("ATEN_START", "ATEN_END") else "ATB")]
            if typ in ("ATEN_START", "ATB_START"):
                g.in_op = True
                g.api += 1
            elif typ in ("ATEN_END", "ATB_END"):
                g.in_op = False
                g.close()
            continue
        if ev not in ("MALLOC", "FREE", "ACCESS"):
            continue
        if ev != "ACCESS" and typ not in ("PTA", "ATB"):
            continue
        attr = _loose_attr(r["Attr"])
        if ev != "ACCESS" and attr.get("shadow") == "true":
            continue
        pool = "PTA" if typ == "PTA" or (ev == "ACCESS" and attr.get("type") == "PTA") else "ATB"
        g = groups[(pid, pool)]
        e = {"event": ev, "id": int(r["ID"]), "size": int(attr.get("size", "-1"))}
        key = (pid, int(attr.get("allocation_id", "-1")))
        if g.in_op:
            e["api"] = g.api
            g.pending.append(e)
            history[key].append(e)
        else:
            g.api += 1
            e["api"] = g.api
            g.pending.append(e)
            history[key].append(e)
            g.close()
        events = history[key]
        if events[0]["event"] != "MALLOC":
            continue
        if ev == "ACCESS":
            if len(events) >= 2 and events[-2]["event"] == "ACCESS" and \
                    e["api"] - events[-2]["api"] > idle_threshold:
                mark(events[0], "temporary_idleness")
            if g.free_api is None:
                continue
            malloc_api, first_access = 0, None
            for x in events:
                if x["event"] == "MALLOC":
                    malloc_api = x["api"]
                elif x["event"] == "ACCESS" and x["api"] != malloc_api:
                    first_access = x["api"]
                    break
            if first_access is None or malloc_api == g.free_api:
                continue
            if malloc_api < g.free_api < first_access:
                mark(events[0], "early_allocation")
        elif ev == "FREE" and g.alloc_api is not None:
            if len(events) < 2 or events[-2]["event"] != "ACCESS":
                continue
            last_access = events[-2]["api"]
            if last_access == g.api:
                continue
            if last_access < g.alloc_api < g.api:
                mark(events[0], "late_deallocation")
    return dict(found)


def leaks_findings(rows, mark_name, start_index=0):
    """Upstream's leak check between marks, per Device Id ('N/A' is no
    device): {device: [(Ptr, size in MB), ...]} or, where the device has
    fewer than 3 MSTX Mark rows named mark_name (upstream: "fewer than 3 data
    points") or too few after start_index, {device: None}.

    The rule: in ID order, the marks number start_index, +1, +2 are A, B, C.
    A HAL MALLOC with A <= ID <= B whose address no HAL FREE with ID >= A
    (and <= C) frees is a leak; its size is Attr size / 2**20.
    """
    by_dev = defaultdict(list)
    for r in rows:
        by_dev[r["Device Id"]].append(r)
    out = {}
    for dev, events in by_dev.items():
        if dev == "N/A":
            continue
        events = sorted(events, key=lambda r: int(r["ID"]))
        marks = [int(r["ID"]) for r in events
                 if r["Event"] == "MSTX" and r["Event Type"] == "Mark" and r["Name"] == mark_name]
        if len(marks) < 3 or len(marks) < start_index + 3:
            out[dev] = None
            continue
        a, b, c = marks[start_index:start_index + 3]
        live = {}
        for r in events:
            i = int(r["ID"])
            if r["Event Type"] != "HAL" or i > c:
                continue
            if r["Event"] == "MALLOC" and a <= i <= b:
                size = int(r["Attr"].split("size:", 1)[1].split(",", 1)[0].rstrip("}"))
                live[i] = (r["Ptr"], size / (1 << 20))
            elif r["Event"] == "FREE" and i >= a:
                live = {k: v for k, v in live.items() if v[0] != r["Ptr"]}
        out[dev] = [live[k] for k in sorted(live)]
    return out
