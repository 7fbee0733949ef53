#!/usr/bin/env python3
"""The data path's samples per CPU-second and per wall second for several variants, side by side.

Each variant is a wam-pipeline binary and the --set overrides it runs with; in every round each
variant runs once at each thread count, one after another, so the host's other load falls on all
of them alike. CPU-seconds are the run's user + system time less a one-sample run's (start-up);
each row is the median over the rounds, with VideoDecode's and Augment's busy ms per sample, and
the last lines give every later variant's ratio to the first, round by round.
Used by scripts/bench.sh (percore: two builds; nvdec: the CPU decoder against NVDEC).

  data_path_compare.py --pipeline pipelines/robotwin_data_online.json --samples 96 --rounds 5 \\
      --threads 1,16 before=/tmp/old/wam-pipeline after=build/wam-pipeline
  data_path_compare.py ... cpu=build/wam-pipeline \\
      nvdec=build/wam-pipeline,nodes.decode.params.decoder=nvdec
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(args, variant, threads, count):
    binary, overrides = variant
    command = [binary, "run", args.pipeline, "--stop-after", args.stop_after, "--threads",
               str(threads), "--report-every", "0", "--quiet", "--set", "settings.seed=7",
               "--set", f"nodes.sampler.params.max_samples={count}"]
    for override in overrides:
        command += ["--set", override]
    with tempfile.NamedTemporaryFile(suffix=".json") as stats:
        start = cpu_seconds()
        done = subprocess.run(command + ["--stats-out", stats.name], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.exit(f"data_path_compare: {' '.join(command)} failed (exit {done.returncode}):\n"
                     f"{done.stderr.strip()}")
        used = cpu_seconds() - start
        result = json.load(open(stats.name))
    busy = {n["id"]: 1000 * n["busy_s"] / count for n in result["nodes"]}
    return used, count / result["wall_s"], busy.get("decode", 0.0), busy.get("augment", 0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default="pipelines/robotwin_data_online.json")
    parser.add_argument("--stop-after", default="augment")
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", default="1", help="thread counts, comma-separated")
    parser.add_argument("variants", nargs="+", metavar="NAME=BINARY[,KEY=VALUE...]")
    args = parser.parse_args()
    variants = {}
    for spec in args.variants:
        name, _, rest = spec.partition("=")
        binary, *overrides = rest.split(",")
        if not name or not binary:
            parser.error(f"variant {spec!r}: expected NAME=BINARY[,KEY=VALUE...]")
        variants[name] = (binary, overrides)
    thread_counts = sorted({int(t) for t in args.threads.split(",")})
    rows = {}
    for threads in thread_counts:
        for round_number in range(1, args.rounds + 1):
            for name, variant in variants.items():
                startup = run(args, variant, threads, 1)[0]
                used, wall_rate, decode, augment = run(args, variant, threads, args.samples)
                # Each run as it ends, so a slow variant shows itself before the table.
                print(f"data_path_compare: {threads} thread(s), {name}, round {round_number}: "
                      f"{args.samples / wall_rate:.1f} s wall, {used:.1f} CPU-s "
                      f"(start-up {startup:.1f})", file=sys.stderr, flush=True)
                rows.setdefault((threads, name), []).append(
                    ((args.samples - 1) / (used - startup), wall_rate, decode, augment))
    width = max(len(name) for name in variants)
    print(f'{"threads":>7} {"run":<{width}} {"samples/CPU-s":>13} {"wall samples/s":>14} '
          f'{"decode ms":>9} {"augment ms":>10}  per CPU-s by round')
    for (threads, name), values in rows.items():
        med = [statistics.median(v[i] for v in values) for i in range(4)]
        print(f'{threads:>7} {name:<{width}} {med[0]:13.2f} {med[1]:14.2f} {med[2]:9.1f} '
              f'{med[3]:10.1f}  ' + " ".join(f"{v[0]:.2f}" for v in values))
    first, *others = variants
    for threads in thread_counts:
        for name in others:
            pairs = list(zip(rows[(threads, name)], rows[(threads, first)]))
            per_cpu = [a[0] / b[0] for a, b in pairs]
            wall = [a[1] / b[1] for a, b in pairs]
            print(f"{threads} thread(s): {name} / {first}, same round: per CPU-s "
                  + " ".join(f"{r:.2f}" for r in per_cpu)
                  + f" (median {statistics.median(per_cpu):.2f}); wall "
                  + " ".join(f"{r:.2f}" for r in wall)
                  + f" (median {statistics.median(wall):.2f})")


if __name__ == "__main__":
    main()
