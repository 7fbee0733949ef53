#!/usr/bin/env bash
# What `run` shows while it runs and what it leaves behind: the live view in a pseudo-terminal,
# progress lines without one, --quiet, --trace-out, the --stats-out series; `graph` and `report`.
# Usage: view_test.sh WAM_TEST_CLI_BINARY (the CLI with the test stages; run from the source root)
set -uo pipefail
bin=$(realpath "$1")
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; [ -n "${2:-}" ] && cat "$2"; failures=$((failures + 1)); }
contains() { grep -qF -- "$2" "$1"; }  # contains FILE TEXT

# About 1.5 s: a slow parallel decode (10 ms per item on average, 2 threads) feeding a serial step.
cat >"$work/p.json" <<'JSON'
{"version": 1, "name": "demo", "nodes": [
  {"id": "source", "type": "Count", "params": {"count": 300}},
  {"id": "decode", "type": "Delay", "inputs": ["source"], "params": {"max_us": 20000}},
  {"id": "plus", "type": "Increment", "inputs": ["decode"]},
  {"id": "batch", "type": "Batch", "inputs": ["plus"], "params": {"size": 8}},
  {"id": "step", "type": "Loss", "inputs": ["batch"]}]}
JSON

# The live view: drawn on a terminal (script gives the run a pseudo-terminal), redrawn in place.
if command -v script >/dev/null; then
  header="node             type                 items/s  busy% starved%  queue in flight  conc"
  header+="  skips errors"
  # items/s, busy%, starved%, queue, in flight, concurrency (auto: 1 or 2), skips, errors
  decode_line='^decode +Delay +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[12] +0 +0.\[K$'
  script -qfec "$bin run $work/p.json --threads 2 --steps 30" "$work/tty" >/dev/null 2>&1
  tr -d '\r' <"$work/tty" >"$work/live"
  if contains "$work/live" "demo  [" && contains "$work/live" "step 30/30" &&
    contains "$work/live" "$header" && grep -qE "$decode_line" "$work/live" &&
    grep -qE '^step +Loss ' "$work/live" && contains "$work/live" $'\x1b[7A' &&
    contains "$work/live" "pipeline demo: "; then
    ok "live view in a terminal"
  else
    fail "live view in a terminal" "$work/live"
  fi
  script -qfec "$bin run $work/p.json --threads 2 --quiet --report-every 0.2" "$work/tty" \
    >/dev/null 2>&1
  tr -d '\r' <"$work/tty" >"$work/quiet"
  if ! contains "$work/quiet" "demo  [" && ! grep -qE '^\[[0-9.]+ s\] out' "$work/quiet" &&
    contains "$work/quiet" "pipeline demo: "; then
    ok "--quiet draws nothing while running"
  else
    fail "--quiet draws nothing while running" "$work/quiet"
  fi
else
  echo "skip live view: no \`script\` (Debian bsdutils)"
fi

# --help states the trace's bound.
"$bin" run --help >"$work/help" 2>&1
bound="Bounded on long runs: past 10000 slices per node or per stage track (at most 4 a node) "
bound+="and 2000 counter samples, every 2nd (then 4th...) is kept, about 2 MB per node and 1 MB "
bound+="per stage track at most"
if tr -s ' \n' ' ' <"$work/help" | grep -qF "$bound"; then
  ok "run --help states the trace's bound"
else
  fail "run --help states the trace's bound" "$work/help"
fi

# Not a terminal: the compact progress line every --report-every seconds, no escapes.
"$bin" run "$work/p.json" --threads 2 --report-every 0.3 --trace-out "$work/trace.json" \
  --stats-out "$work/stats.json" >"$work/out" 2>"$work/err"
progress='^\[[0-9.]+ s\] out [0-9]+ \([0-9.]+/s\) busy%: source [0-9]+ decode [0-9]+'
if grep -qE "$progress" "$work/err" &&
  ! grep -q $'\x1b' "$work/out" "$work/err"; then
  ok "progress lines when stdout is not a terminal"
else
  fail "progress lines when stdout is not a terminal" "$work/err"
fi

/usr/bin/python3 - "$work/trace.json" "$work/stats.json" <<'PY' || failures=$((failures + 1))
import json, sys
trace, stats = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
problems = []
events = trace["traceEvents"]
names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
if names != {"source: Count", "decode: Delay", "plus: Increment", "batch: Batch", "step: Loss"}:
    problems.append(f"process tracks {names}")
steps = sorted(int(e["name"].split()[1]) for e in events if e["ph"] == "X" and e["pid"] == 5)
if steps != list(range(1, 39)):
    problems.append(f"step slices {steps[:5]}...")
if {e["name"] for e in events if e["ph"] == "C"} != {"queue depth", "in flight", "items/s"}:
    problems.append("counter tracks")
series = stats["series"]
for node in stats["nodes"]:
    s = series["nodes"][node["id"]]
    if sum(s["items"]) != node["out"] or abs(sum(s["busy_s"]) - node["busy_s"]) > 1e-6:
        problems.append(f"{node['id']} series {sum(s['items'])} vs {node['out']}")
    if not len(s["items"]) == len(s["queue"]) == len(series["t"]) >= 1:
        problems.append(f"{node['id']} series lengths")
if series["loss"]["step"] != list(range(1, 39)) or series["loss"]["value"][0] != 0.5:
    problems.append("loss series")
print("FAIL trace and stats: " + "; ".join(problems) if problems else "ok   trace and stats series")
sys.exit(1 if problems else 0)
PY

# graph --stats: a deliberately slow serial stage is the one marked.
cat >"$work/slow.json" <<'JSON'
{"version": 1, "name": "slow", "nodes": [
  {"id": "source", "type": "Count", "params": {"count": 200}},
  {"id": "fast", "type": "Increment", "inputs": ["source"]},
  {"id": "slow", "type": "Delay", "inputs": ["fast"], "params": {"max_us": 4000},
   "concurrency": 1},
  {"id": "step", "type": "Loss", "inputs": ["slow"]}]}
JSON
"$bin" run "$work/slow.json" --threads 2 --quiet --stats-out "$work/slow_stats.json" >/dev/null 2>&1
"$bin" graph "$work/slow.json" --stats "$work/slow_stats.json" -o "$work/slow.dot" 2>"$work/err"
marked='^  "slow" \[label="BOTTLENECK\\nslow\\nDelay\\nserial, busy (9[0-9]|100)%\\n[0-9.]+ '
marked+='items/s", fillcolor="0.0[0-9]+ 0.45 1.000", color="red", penwidth=3'
verdict='^slow \(Delay\) is the bottleneck: (9[0-9]|100)% busy \(serial\); '
verdict+='step waits on input [0-9]+% of the time$'
if grep -qE "$marked" "$work/slow.dot" &&
  [ "$(grep -c BOTTLENECK "$work/slow.dot")" -eq 1 ] &&
  grep -qE "$verdict" "$work/err"; then
  ok "graph --stats marks the slow node (DOT)"
else
  fail "graph --stats marks the slow node (DOT)" "$work/slow.dot"; cat "$work/err"
fi
if command -v dot >/dev/null; then
  "$bin" graph "$work/slow.json" --stats "$work/slow_stats.json" -o "$work/slow.svg" 2>/dev/null
  /usr/bin/python3 - "$work/slow.svg" <<'PY' || failures=$((failures + 1))
import re, sys
svg = open(sys.argv[1]).read()
nodes = dict(re.findall(r'<g id="node\d+" class="node">\s*<title>([^<]+)</title>(.*?)</g>', svg,
                        re.S))
marked = [n for n, body in nodes.items() if "BOTTLENECK" in body]
ok = (sorted(nodes) == ["fast", "slow", "source", "step"] and marked == ["slow"]
      and 'stroke="red"' in nodes["slow"])
print(("ok   " if ok else f"FAIL graph SVG: nodes {sorted(nodes)}, marked {marked}: ")
      + "graph --stats -o F.svg marks the slow node")
sys.exit(0 if ok else 1)
PY
  "$bin" graph "$work/slow.json" -o "$work/slow.png" 2>/dev/null
  [ "$(head -c 8 "$work/slow.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] &&
    ok "graph -o F.png" || fail "graph -o F.png"
else
  echo "skip graph SVG/PNG: no Graphviz dot (scripts/setup.sh installs graphviz)"
fi

# report: one self-contained HTML file, rendered by headless Chromium.
"$bin" report "$work/slow_stats.json" -o "$work/report.html" >"$work/out" 2>&1 &&
  grep -qE '^slow \(Delay\) is the bottleneck' "$work/out" && ok "report writes the page" ||
  fail "report writes the page" "$work/out"
chromium_bin=$(command -v chromium || command -v chromium-browser || true)
if [ -n "$chromium_bin" ]; then
  chrome=("$chromium_bin" --headless --no-sandbox --disable-gpu --hide-scrollbars
          --user-data-dir="$work/chromium")
  timeout 120 "${chrome[@]}" --dump-dom "file://$work/report.html" >"$work/dom.html" 2>/dev/null
  timeout 120 "${chrome[@]}" --window-size=1000,1400 --screenshot="$work/report.png" \
    "file://$work/report.html" >/dev/null 2>&1
  /usr/bin/python3 - "$work/dom.html" "$work/report.png" <<'PY' || failures=$((failures + 1))
import re, struct, sys, zlib
dom = open(sys.argv[1]).read()
problems = []
verdict = re.search(r'<p class="verdict" id="verdict">([^<]*)</p>', dom)
expected = (r"slow \(Delay\) is the bottleneck: (9\d|100)% busy \(serial\); "
            r"step waits on input \d+% of the time")
if not verdict or not re.fullmatch(expected, verdict.group(1)):
    problems.append(f"verdict {verdict and verdict.group(1)}")
for text in ("<h1>slow</h1>", "<h2>Graph</h2>", "<h2>Over time</h2>", "<h2>Summary</h2>",
             "<title>Throughput per node</title>", "<title>Queue depth per node</title>",
             "<title>Loss</title>", '<tr class="bottleneck"><td>slow</td><td>Delay</td>'):
    if text not in dom:
        problems.append(f"missing {text}")
if "BOTTLENECK" not in dom or dom.count("<svg") < 4:
    problems.append("the graph or the charts are missing")

def pixels(path):  # an 8-bit RGB/RGBA non-interlaced PNG, decoded
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    assert depth == 8 and colour in (2, 6)
    bpp = 3 if colour == 2 else 4
    raw, stride, prev, rows, i = zlib.decompress(idat), width * bpp, bytearray(width * bpp), [], 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1: line[x] = (line[x] + a) & 255
            elif f == 2: line[x] = (line[x] + b) & 255
            elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows

try:
    width, height, bpp, rows = pixels(sys.argv[2])
    colours, inked = set(), 0
    for row in rows[::4]:
        for x in range(0, width * bpp, bpp * 4):
            px = row[x:x + 3]
            colours.add(px)
            inked += px != b"\xff\xff\xff"
    if (width, height) != (1000, 1400) or len(colours) < 8 or inked < 2000:
        problems.append(f"screenshot looks blank: {width}x{height}, {len(colours)} colours, "
                        f"{inked} inked samples")
except Exception as e:
    problems.append(f"screenshot: {e!r}")
print("FAIL report in Chromium: " + "; ".join(problems) if problems
      else "ok   report renders in headless Chromium (text and a non-blank screenshot)")
sys.exit(1 if problems else 0)
PY
else
  echo "skip report in Chromium: no chromium (scripts/setup.sh installs it)"
fi

# The bf16/fp8 loss curves (scripts/step-bench.sh, WAM_STEP_BENCH_LOSS_STEPS) from [train] lines.
/usr/bin/python3 - "$work" <<'PY'
import sys
for run, offset in (("bf16", 0.0), ("fp8", 0.02)):
    with open(f"{sys.argv[1]}/loss_{run}.log", "w") as log:
        for step in range(1, 31):
            log.write(f"[step] [train] epoch=0 step={step}/30 loss={2 + 1 / step + offset:.4f} "
                      "video=1.0000 action=1.0000\n")
PY
/usr/bin/python3 scripts/loss_plot.py "$work/loss.svg" "bf16 and fp8" bf16="$work/loss_bf16.log" \
  fp8="$work/loss_fp8.log" >"$work/out"
/usr/bin/python3 - "$work/loss.svg" "$work/out" <<'PY' || failures=$((failures + 1))
import sys, xml.dom.minidom
svg = xml.dom.minidom.parse(sys.argv[1])
lines = svg.getElementsByTagName("polyline")
table = open(sys.argv[2]).read()
# Last 20 steps (11..30): bf16 mean 2 + mean(1/s), fp8 0.02 above it.
bf16 = 2 + sum(1 / s for s in range(11, 31)) / 20
ok = (len(lines) == 4 and all(len(l.getAttribute("points").split()) == 30 for l in lines)
      and f"  bf16         30      3.0000 {bf16:17.4f}     +0.00%" in table
      and f"  fp8          30      3.0200 {bf16 + 0.02:17.4f} {0.02 / bf16 * 100:+9.2f}%" in table)
print(("ok   " if ok else f"FAIL loss plot {len(lines)}:\n{table}") + "the loss curves' SVG and table")
sys.exit(0 if ok else 1)
PY
if /usr/bin/python3 scripts/loss_plot.py "$work/l.svg" t fp8="$work/none.log" 2>"$work/err"; then
  fail "loss_plot.py read a missing log"
elif contains "$work/err" "loss_plot.py: cannot read $work/none.log: No such file or directory"; then
  ok "loss_plot.py names a missing log"
else
  fail "loss_plot.py's error for a missing log" "$work/err"
fi

# The profile ladder's plot (scripts/bench.sh ladder) from `bench P1 P2... --json`'s table.
cat >"$work/ladder.json" <<'JSON'
{"table": [
 {"pipeline": "robotwin_baseline", "samples_per_s": 10.0, "vs_first": 1.0,
  "pipeline_efficiency": 0.41, "peak_bytes": 3},
 {"pipeline": "robotwin_online", "samples_per_s": 25.0, "vs_first": 2.5,
  "pipeline_efficiency": 0.95, "peak_bytes": 3},
 {"pipeline": "robotwin_compile", "samples_per_s": 40.0, "vs_first": 4.0,
  "pipeline_efficiency": null, "peak_bytes": -1}],
 "pipelines": []}
JSON
/usr/bin/python3 scripts/ladder_plot.py "$work/ladder.json" robotwin "$work/ladder.svg" >"$work/out"
/usr/bin/python3 - "$work/ladder.svg" "$work/out" <<'PY' || failures=$((failures + 1))
import sys, xml.dom.minidom
svg = xml.dom.minidom.parse(sys.argv[1])
bars = [r for r in svg.getElementsByTagName("rect") if r.getAttribute("class") == "bar"]
heights = [float(b.getAttribute("height")) for b in bars]
titles = [b.getElementsByTagName("title")[0].firstChild.data for b in bars]
table = open(sys.argv[2]).read()
ok = (len(bars) == 3 and abs(heights[1] / heights[0] - 2.5) < 0.01
      and abs(heights[2] / heights[0] - 4) < 0.01
      and titles[0] == "robotwin_baseline: 10.00 samples/s"
      and "  robotwin_online             25.00       0.950     2.50x\n" in table
      and "  robotwin_compile            40.00           -     4.00x\n" in table)
print(("ok   " if ok else f"FAIL ladder plot {heights} {titles}: ")
      + "the ladder's SVG plot and table")
sys.exit(0 if ok else 1)
PY

echo "$failures failed"
[ "$failures" -eq 0 ]
