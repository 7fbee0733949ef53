#!/usr/bin/env python3
"""Loss curves of runs on the same data, from their `[train] ... step=N/T loss=X` log lines (e.g.
bf16 against fp8 products, scripts/step-bench.sh with WAM_STEP_BENCH_LOSS_STEPS): prints the
mean loss of each run over its last 20 logged steps and the gap to the first run's, and writes an
SVG of each run's loss (faint) and its 10-step running mean.

Usage: loss_plot.py OUT_SVG TITLE NAME=LOG [NAME=LOG ...]
"""
import re
import sys
from xml.sax.saxutils import escape

LINE = re.compile(r"\[train\] .*?step=(\d+)/\d+ loss=([0-9.eE+-]+|nan|inf)")
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
TAIL = 20


def read_losses(path):
    losses = {}
    try:
        lines = open(path, errors="replace").readlines()
    except OSError as e:
        sys.exit(f"loss_plot.py: cannot read {path}: {e.strerror}")
    for line in lines:
        match = LINE.search(line)
        if match:
            losses[int(match.group(1))] = float(match.group(2))
    if not losses:
        sys.exit(f"loss_plot.py: {path} has no [train] lines (was log_every set?)")
    return sorted(losses.items())


def running_mean(values, window=10):
    out = []
    for i in range(len(values)):
        part = values[max(0, i - window + 1):i + 1]
        out.append(sum(part) / len(part))
    return out


def main(out, title, runs):
    curves = []
    for run in runs:
        name, _, path = run.partition("=")
        if not name or not path:
            sys.exit(f"loss_plot.py: '{run}' is not NAME=LOG (e.g. fp8=loss_fp8.log)")
        curves.append((name, read_losses(path)))
    print(f"## {title}")
    print(f"  {'run':<8} {'steps':>6} {'first loss':>11} {'mean of last ' + str(TAIL):>17} "
          f"{'vs ' + curves[0][0]:>10}")
    reference = None
    for name, points in curves:
        tail = [loss for _, loss in points[-TAIL:]]
        mean = sum(tail) / len(tail)
        reference = mean if reference is None else reference
        gap = (mean - reference) / reference * 100
        print(f"  {name:<8} {points[-1][0]:6d} {points[0][1]:11.4f} {mean:17.4f} {gap:+9.2f}%")

    width, height, left, right, top, bottom = 720, 360, 60, 20, 40, 50
    steps = [s for _, points in curves for s, _ in points]
    losses = [v for _, points in curves for _, v in points]
    x0, x1 = min(steps), max(steps)
    y0, y1 = 0.0, max(losses) * 1.05

    def x(step):
        return left + (step - x0) / max(x1 - x0, 1) * (width - left - right)

    def y(value):
        return top + (1 - (value - y0) / (y1 - y0)) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="{left}" y1="{y(y0)}" x2="{width - right}" y2="{y(y0)}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{y(y0)}" stroke="black"/>',
        f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">optimizer step</text>',
        f'<text x="16" y="{top + (height - top - bottom) / 2}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + (height - top - bottom) / 2})">loss</text>',
    ]
    for i in range(6):
        value = y0 + (y1 - y0) * i / 5
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4}" text-anchor="end">'
                     f'{value:.2f}</text>')
        step = x0 + (x1 - x0) * i / 5
        parts.append(f'<text x="{x(step)}" y="{y(y0) + 16}" text-anchor="middle">'
                     f'{step:.0f}</text>')
    for index, (name, points) in enumerate(curves):
        colour = COLOURS[index % len(COLOURS)]
        raw = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
        mean = running_mean([v for _, v in points])
        smooth = " ".join(f"{x(s):.1f},{y(v):.1f}" for (s, _), v in zip(points, mean))
        parts.append(f'<polyline points="{raw}" fill="none" stroke="{colour}" '
                     'stroke-opacity="0.25"/>')
        parts.append(f'<polyline points="{smooth}" fill="none" stroke="{colour}" '
                     'stroke-width="2"/>')
        parts.append(f'<text x="{width - right - 150}" y="{top + 16 * (index + 1)}" '
                     f'fill="{colour}">{escape(name)} (10-step mean)</text>')
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
