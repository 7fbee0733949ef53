#!/usr/bin/env python3
"""The profile ladder from `wam-pipeline bench P1 P2... --json F`: prints the table and writes an
SVG bar chart of samples/s (with the speed-up over the first and the pipeline efficiency).

Usage: ladder_plot.py BENCH_JSON TITLE OUT_SVG
"""
import json
import sys
from xml.sax.saxutils import escape


def main(path, title, out):
    rows = json.load(open(path))["table"]
    print(f"## {title} ladder (whole graph)")
    print(f"  {'pipeline':<22} {'samples/s':>10} {'efficiency':>11} {'vs first':>9}")
    for r in rows:
        eff = r["pipeline_efficiency"]
        eff_text = f"{eff:11.3f}" if eff is not None else f"{'-':>11}"
        print(f"  {r['pipeline']:<22} {r['samples_per_s']:10.2f} {eff_text} "
              f"{r['vs_first']:8.2f}x")

    width, height, left, top, bottom = 640, 320, 60, 40, 70
    plot_h = height - top - bottom
    top_value = max([r["samples_per_s"] for r in rows] + [1e-9]) * 1.15
    slot = (width - left - 20) / len(rows)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="15" font-weight="bold">{escape(title)}: '
        'samples/s per profile</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 20}" y2="{top + plot_h}" '
        'stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>',
    ]
    for k in range(5):
        value = top_value * k / 4
        y = top + plot_h * (1 - value / top_value)
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{value:.3g}</text>')
    for i, r in enumerate(rows):
        h = plot_h * r["samples_per_s"] / top_value
        x = left + slot * i + slot * 0.15
        w = slot * 0.7
        y = top + plot_h - h
        eff = r["pipeline_efficiency"]
        note = f'{r["vs_first"]:.2f}x' + (f", eff {eff:.2f}" if eff is not None else "")
        parts += [
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" '
            f'fill="#1f77b4"><title>{escape(r["pipeline"])}: {r["samples_per_s"]:.2f} '
            'samples/s</title></rect>',
            f'<text x="{x + w / 2:.1f}" y="{y - 6:.1f}" text-anchor="middle">'
            f'{r["samples_per_s"]:.1f} ({note})</text>',
            f'<text x="{x + w / 2:.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
            f'{escape(r["pipeline"])}</text>',
        ]
    parts.append("</svg>\n")
    with open(out, "w") as f:
        f.write("\n".join(parts))
    print(f"  plot: {out}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
