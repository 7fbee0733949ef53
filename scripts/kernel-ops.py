#!/usr/bin/env python3
"""Kernels of a Chrome trace grouped by the operators that launched them.

A trace of `wam-pipeline bench --profile --profile-first --trace FILE` (a compiled step's eager
warm-up and capture) links every kernel to its operator through the "External id" both carry;
replays of a captured graph have kernels alone. Prints the longest (kernel, operator, enclosing
autograd node) groups, with the operator's input dtypes and shapes when the trace recorded them:

    scripts/kernel-ops.py TRACE [--top N] [--match SUBSTRING]
"""
import argparse
import collections
import json


def short_kernel(name):
    # Templated kernel names run to hundreds of characters; their head tells them apart.
    return name if len(name) <= 90 else name[:87] + "..."


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--match", default="", help="only kernels whose name contains this")
    args = parser.parse_args()
    events = json.load(open(args.trace))["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    kernels = [e for e in events if e.get("cat") == "kernel" and args.match in e.get("name", "")]

    # Each operator's enclosing autograd node (or top-level operator), from nesting per thread.
    by_id, outer = {}, {}
    for tid in {e["tid"] for e in ops}:
        stack = []
        for e in sorted((e for e in ops if e["tid"] == tid), key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < e["ts"]:
                stack.pop()
            node = next((s["name"] for s in reversed(stack)
                         if s["name"].startswith("autograd::engine::evaluate_function")), None)
            if node is None and stack:
                node = stack[0]["name"]
            eid = e.get("args", {}).get("External id")
            if eid is not None:
                by_id[eid] = e
                outer[eid] = (node or "-").replace("autograd::engine::evaluate_function: ", "")
            stack.append(e)

    total, calls = collections.Counter(), collections.Counter()
    for k in kernels:
        eid = k.get("args", {}).get("External id")
        op = by_id.get(eid)
        a = op.get("args", {}) if op else {}
        key = (short_kernel(k["name"]), op["name"] if op else "?", outer.get(eid, "?"),
               str(a.get("Input type", "")), str(a.get("Input Dims", ""))[:80])
        total[key] += k.get("dur", 0) / 1000.0
        calls[key] += 1
    print(f"{sum(total.values()):.2f} ms in {len(kernels)} kernels")
    for key, ms in total.most_common(args.top):
        kernel, op, node, types, dims = key
        print(f"{ms:8.2f} ms {calls[key]:5d}x  {kernel}\n      op {op}  in {node}  types {types}"
              f"  dims {dims}")


if __name__ == "__main__":
    main()
