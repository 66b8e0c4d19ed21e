#!/usr/bin/env python3
"""Checks a plan explorer page (or a plan diff page) after Chromium ran its
scripts, against numbers computed here from the plan JSON, independently of
the page's own code.

  check.py plan PLAN.json DOM.html SHOT.png [TENSOR QUERY]
    (the page was opened as plan.html#tensor=TENSOR&q=QUERY)
  check.py diff A.json B.json DOM.html SHOT.png
  check.py pointer PLAN.json DOM.html   (the DOM of tests/explorer/pointer.html)
"""
import html
import json
import re
import struct
import sys
import zlib


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def png_pixels(path):
    """(width, height, channels, rows of bytes) of an 8-bit RGB/RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(path + ": not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if typ == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                fail("unexpected PNG format %d/%d" % (depth, ctype))
            ch = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * ch
    prev = bytearray(stride)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(ch, stride):
                line[i] = (line[i] + line[i - ch]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - ch] if i >= ch else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - ch] if i >= ch else 0
                b, c = prev[i], prev[i - ch] if i >= ch else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, ch, rows


def check_shot(path):
    """The screenshot is not blank: many non-white pixels, many colours."""
    w, h, ch, rows = png_pixels(path)
    nonwhite, colours = 0, set()
    for y in range(0, h, 3):
        r = rows[y]
        for x in range(0, w, 3):
            px = bytes(r[x * ch:x * ch + 3])
            colours.add(px)
            if px != b"\xff\xff\xff":
                nonwhite += 1
    total = ((h + 2) // 3) * ((w + 2) // 3)
    if nonwhite < total * 0.05 or len(colours) < 12:
        fail("%s looks blank: %d of %d sampled pixels not white, %d colours" % (path, nonwhite, total, len(colours)))
    print("screenshot %dx%d: %.0f%% not white, %d colours" % (w, h, 100.0 * nonwhite / total, len(colours)))


def buffers(plan):
    """Arena storage tensors grouped into in-place chains: {head: [members]}."""
    ts = plan["tensors"]
    groups = {}
    for t in ts:
        if t["view_of"] is not None or t["first"] is None or t["region"] != "arena":
            continue
        h = t["id"]
        while ts[h]["inplace_of"] is not None:
            h = ts[h]["inplace_of"]
        groups.setdefault(h, []).append(t["id"])
    out = []
    for members in groups.values():
        out.append({
            "members": members,
            "first": min(ts[i]["first"] for i in members),
            "last": max(ts[i]["last"] for i in members),
            "size": max((ts[i]["bytes"] + 255) // 256 * 256 for i in members),
        })
    return out


def peak(plan, bufs):
    n = len(plan["schedule"])
    live = [0] * n
    for b in bufs:
        for s in range(b["first"], b["last"] + 1):
            live[s] += b["size"]
    best = max(live) if live else 0
    return (live.index(best) if live else -1), best


def stats(dom):
    m = re.search(r'<div id="stats"([^>]*)>', dom)
    if not m:
        fail("no #stats in the DOM (did the script run?)")
    return {k: v for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', m.group(1))}


def want(what, got, expected):
    if str(got) != str(expected):
        fail("%s: page says %s, expected %s" % (what, got, expected))


def live_step(dom):
    m = re.search(r'id="live-step">(\d+)<', dom)
    return int(m.group(1)) if m else None


def check_live(plan, bufs, dom, step):
    """The live list shows exactly the buffers live at step (each as its
    member live there: the child at a handover), by name."""
    ts = plan["tensors"]
    m = re.search(r'id="live-count">(\d+)<', dom)
    live = [b for b in bufs if b["first"] <= step <= b["last"]]
    want("live count", m and m.group(1), len(live))
    expected = set()
    for b in live:
        ms = sorted(b["members"], key=lambda i: (ts[i]["first"], i))
        cur = ms[0]
        for i in ms:
            if ts[i]["first"] <= step:
                cur = i
        expected.add(cur)
    rows = re.search(r'<div id="live".*?</table>', dom, re.S).group(0)
    got = set(int(i) for i in re.findall(r'<tr data-t="(\d+)"', rows))
    if got != expected:
        fail("live tensors differ: page only %s, plan only %s" % (sorted(got - expected)[:5], sorted(expected - got)[:5]))
    names = [s.strip() for s in re.findall(r'<td class="tn">([^<]*)', rows)]
    for i in expected:
        if ts[i]["name"] not in names:
            fail("tensor %s missing from the live list" % ts[i]["name"])
    m = re.search(r'id="live-sum" data-bytes="(\d+)"', dom)
    want("live sum", m and m.group(1), sum(b["size"] for b in live))
    return live


def check_pointer(plan_path, dom_path):
    """tests/explorer/pointer.html drove the page with pointer events."""
    plan = json.load(open(plan_path))
    dom = open(dom_path, encoding="utf-8").read()
    m = re.search(r'<div id="out"([^>]*)>', dom)
    if not m:
        fail("no #out in the driver's DOM")
    out = {k: html.unescape(v) for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', m.group(1))}
    if "error" in out or out.get("ready") != "1":
        fail("the driver failed: %s" % out.get("error"))
    arena = {t["name"] for t in plan["tensors"] if t["region"] == "arena"}
    hovered = json.loads(out["hover-names"])
    bufs = buffers(plan)
    if len(hovered) < min(10, len(bufs)) or not set(hovered) <= arena:
        fail("hover showed %d tensors (%s)" % (len(hovered), sorted(set(hovered) - arena)[:5]))
    want("click selects the hovered tensor", out.get("clicked-name"), out.get("hover-name"))
    step = live_step(dom)
    pstep, _ = peak(plan, bufs)
    if step is None or step == pstep:
        fail("a click on the x axis did not move the live list (step %s)" % step)
    live = check_live(plan, bufs, dom, step)
    print("pointer: hover found %d tensors, click selected %s, axis click: step %d with %d live"
          % (len(hovered), out["hover-name"], step, len(live)))


def check_selection(plan, dom, name, query):
    """#tensor=NAME selected it: its card with the source line, its producer
    and its readers (through views too) marked in the schedule; #q=QUERY
    searched tensor and op names."""
    ts, sched = plan["tensors"], plan["schedule"]
    i = [t["id"] for t in ts if t["name"] == name][0]
    prod = min([s["step"] for s in sched if i in s["outputs"]] or [-1])
    under, todo = {i}, [i]
    while todo:
        j = todo.pop()
        for t in ts:
            if t["view_of"] == j and t["id"] not in under:
                under.add(t["id"])
                todo.append(t["id"])
    readers = {s["step"] for s in sched if under & set(s["inputs"])}
    marks = {}
    for cls, step in re.findall(r'<div class="(row[^"]*)" data-step="(\d+)"', dom):
        for c in cls.split()[1:]:
            marks.setdefault(c, set()).add(int(step))
    want("producer row", sorted(marks.get("prod", [])), [prod] if prod >= 0 else [])
    if marks.get("cons", set()) != readers:
        fail("reader rows %s, expected %s" % (sorted(marks.get("cons", []))[:8], sorted(readers)[:8]))
    card = re.search(r'<div id="selinfo".*?</p>', dom, re.S).group(0)
    if ('<div class="tname">%s</div>' % html.escape(name)) not in card:
        fail("the selected tensor's card is missing")
    line = plan["source_lines"][ts[i]["src"].rsplit(":", 1)[0]].strip()
    if html.escape(line, quote=False) not in card or ts[i]["src"] not in card:
        fail("the card lacks the source line %r" % line)
    q = query.lower()
    nt = sum(q in t["name"].lower() for t in ts)
    no = sum(q in s["name"].lower() or q in s["op"].lower() for s in sched)
    m = re.search(r'<div id="results"[^>]*><b>(\d+)</b> tensors, <b>(\d+)</b> ops match', dom)
    want("search matches", m and (m.group(1), m.group(2)), (str(nt), str(no)))
    print("selection: %s made at step %d, read at %d steps; search %r: %d tensors, %d ops"
          % (name, prod, len(readers), query, nt, no))


def check_plan(plan_path, dom_path, shot_path, name=None, query=None):
    plan = json.load(open(plan_path))
    dom = open(dom_path, encoding="utf-8").read()
    st = stats(dom)
    want("ready", st.get("ready"), 1)
    ts = plan["tensors"]
    bufs = buffers(plan)
    pstep, pbytes = peak(plan, bufs)
    if pbytes != plan["totals"]["arena_lower_bound"]:
        fail("peak %d != arena_lower_bound %d" % (pbytes, plan["totals"]["arena_lower_bound"]))
    want("tensors", st.get("tensors"), len(ts))
    want("steps", st.get("steps"), len(plan["schedule"]))
    want("buffers", st.get("buffers"), len(bufs))
    want("buffers drawn", st.get("drawn"), len(bufs))
    want("peak step", st.get("peak-step"), pstep)
    want("peak bytes", st.get("peak-bytes"), pbytes)
    # the page opens at the peak with the live list shown
    want("live list step", live_step(dom), pstep)
    live = check_live(plan, bufs, dom, pstep)
    m = re.search(r'id="live-sum" data-bytes="(\d+)"', dom)
    want("live sum", m and m.group(1), pbytes)
    steps = set(re.findall(r'<div class="row[^"]*" data-step="(\d+)"', dom))
    want("schedule rows", len(steps), len(plan["schedule"]))
    if plan["budget_bytes"] is not None:
        fits = sum(r["bytes"] for r in plan["regions"] if r.get("device", True)) <= plan["budget_bytes"]
        if not re.search(r'class="mark budget[^"]*"[^>]*><span>budget [^<]*\((%s)\)' % ("fits" if fits else "does not fit"), dom):
            fail("the regions bar does not mark the budget")
    host = sum(r["bytes"] for r in plan["regions"] if not r.get("device", True))
    if host and ('data-host-bytes="%d"' % host) not in dom:
        fail("the host region (%d bytes) is not shown beside the device total" % host)
    for s in plan.get("strategies", []):
        if ('<b>%s</b>' % s["name"]) not in dom:
            fail("strategy %s not shown" % s["name"])
    # source locations: every tensor made from a .graph line has its text
    lines = plan.get("source_lines", {})
    with_src = [t for t in ts if "src" in t]
    if len(with_src) < len(ts) * 0.9:
        fail("only %d of %d tensors have a source location" % (len(with_src), len(ts)))
    for t in with_src:
        key = t["src"].rsplit(":", 1)[0]
        if key not in lines:
            fail("no source line for %s (%s)" % (t["name"], t["src"]))
    logits = [t for t in ts if t["name"] == "logits"]
    if logits and "logits = matmul" not in lines[logits[0]["src"].rsplit(":", 1)[0]]:
        fail("the source line of logits is not its definition")
    print("plan page: %d tensors, %d buffers, peak step %d (%d bytes), %d live there"
          % (len(ts), len(bufs), pstep, pbytes, len(live)))
    if name:
        check_selection(plan, dom, name, query)
    check_shot(shot_path)


def check_diff(a_path, b_path, dom_path, shot_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    dom = open(dom_path, encoding="utf-8").read()
    st = stats(dom)
    want("ready", st.get("ready"), 1)
    ba, bb = buffers(a), buffers(b)
    want("peak A", st.get("peak-a"), peak(a, ba)[0])
    want("peak B", st.get("peak-b"), peak(b, bb)[0])
    want("buffers A", st.get("buffers-a"), len(ba))
    want("buffers B", st.get("buffers-b"), len(bb))
    want("drawn A", st.get("drawn-a"), len(ba))
    want("drawn B", st.get("drawn-b"), len(bb))
    ta = {t["name"]: t for t in a["tensors"]}
    tb = {t["name"]: t for t in b["tensors"]}

    def lifetime(plan, t):   # the whole schedule counts as one lifetime
        if t["first"] == 0 and t["last"] == len(plan["schedule"]) - 1:
            return "all"
        return (t["first"], t["last"])

    def ref(plan, i):
        return None if i is None else plan["tensors"][i]["name"]

    n = {"region": 0, "lifetime": 0, "storage": 0, "moved": 0, "changed": 0}
    for name, x in ta.items():
        y = tb.get(name)
        if y is None:
            continue
        r = x["region"] != y["region"]
        life = lifetime(a, x) != lifetime(b, y)
        sto = (x["bytes"], x["dtype"], ref(a, x["inplace_of"]), ref(a, x["view_of"])) != \
              (y["bytes"], y["dtype"], ref(b, y["inplace_of"]), ref(b, y["view_of"]))
        n["region"] += r
        n["lifetime"] += life
        n["storage"] += sto
        n["moved"] += x["offset"] != y["offset"]
        n["changed"] += r or life or sto
    n["only-a"] = len(set(ta) - set(tb))
    n["only-b"] = len(set(tb) - set(ta))
    for k, v in n.items():
        want("tensors " + k, st.get(k), v)
    # bytes by region: the page's row for each region carries both sizes
    for r in a["regions"]:
        if ('data-region="%s"' % r["name"]) not in dom:
            fail("region %s missing" % r["name"])
    print("diff page: " + ", ".join("%s %d" % kv for kv in n.items()))
    check_shot(shot_path)


if __name__ == "__main__":
    if sys.argv[1] == "plan":
        check_plan(*sys.argv[2:7])
    elif sys.argv[1] == "pointer":
        check_pointer(*sys.argv[2:4])
    else:
        check_diff(*sys.argv[2:6])
