#!/usr/bin/env bash
# scripts/peer_step.py, the PyTorch peer of the training step, against wam-pipeline: the same
# parameters (count, names and shapes) for each model preset, and a CPU eager step on the tiny
# preset that trains. Runs Debian's PyTorch 1.13 (python3-torch, /usr/bin/python3, which
# scripts/setup.sh installs), or where that has none the PATH's python3 (the GPU image's 2.11).
# Usage: peer_step_test.sh WAM_PIPELINE_BINARY WAM_PEER_REFERENCE_BINARY (from the source root)
set -uo pipefail
bin=$1
reference=$2
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || py=python3
peer=scripts/peer_step.py
failures=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check() {  # check NAME CONDITION_STATUS [DETAILS]
  if [ "$2" -eq 0 ]; then echo "ok   $1"; else echo "FAIL $1 ${3:-}"; failures=$((failures + 1)); fi
}
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "FAIL neither /usr/bin/python3 nor python3 has torch (scripts/setup.sh: python3-torch)"
  exit 1
fi

# The presets whose notes state their size: the peer builds them on the meta device.
for preset in tiny base paper; do
  stated=$(sed -n 's/.* \([0-9][0-9,]*\) parameters.*/\1/p' "configs/model/$preset.json" | tr -d ,)
  got=$("$py" "$peer" --model "configs/model/$preset.json" --count-only |
    sed -n 's/^peer: \([0-9]*\) parameters .*/\1/p')
  [ -n "$stated" ] && [ "$got" = "$stated" ]
  check "$preset: the peer has the $stated parameters the preset states" $? "(got $got)"
done

# The count wam-pipeline prints when TrainStep opens, and the names and shapes of the parameters
# it saves (step_1.safetensors), loaded strictly by the peer, for tiny and small.
export ROBOTWIN_DATA_ROOT=$work/robotwin WAM_OUTPUT_ROOT=$work/runs
"$bin" dataset synth --preset robotwin --episodes 2 --frames-per-episode 40 --size 80x64 \
  --codec h264 --out "$ROBOTWIN_DATA_ROOT" >"$work/synth.txt" 2>&1 ||
  { echo "FAIL dataset synth"; cat "$work/synth.txt"; exit 1; }
for preset in tiny small; do
  export WAM_CACHE_ROOT=$work/cache_$preset
  args=(--set "include.model=configs/model/$preset.json" --set settings.batch_size=2
    --set settings.device=cpu --set "nodes.step.params.checkpoint_dir=$work/state_$preset")
  "$bin" text-cache build pipelines/robotwin_online.json "${args[@]}" >"$work/out" 2>&1 &&
    "$bin" run pipelines/robotwin_online.json "${args[@]}" --steps 1 >"$work/out" 2>&1
  check "$preset: wam-pipeline trains a step" $? "$(tail -5 "$work/out")"
  ours=$(sed -n 's/^\[step\] TrainStep: \([0-9]*\) parameters on cpu.*/\1/p' "$work/out")
  theirs=$("$py" "$peer" --model "configs/model/$preset.json" --count-only |
    sed -n 's/^peer: \([0-9]*\) parameters .*/\1/p')
  [ -n "$ours" ] && [ "$ours" = "$theirs" ]
  check "$preset: the peer's parameter count is wam-pipeline's ($ours)" $? "(peer: $theirs)"
  "$py" "$peer" --model "configs/model/$preset.json" --device cpu --compile none --batch 1 \
    --steps 1 --warmup 0 --weights "$work/state_$preset/step_1.safetensors" >"$work/out" 2>&1
  status=$?
  tensors=$("$py" -c "import json, struct, sys
f = open(sys.argv[1], 'rb'); n = struct.unpack('<Q', f.read(8))[0]
print(sum(k.startswith('model.') for k in json.loads(f.read(n))))" \
    "$work/state_$preset/step_1.safetensors")
  loaded="peer: $tensors parameter tensors from $work/state_$preset/step_1.safetensors"
  [ "$status" -eq 0 ] && grep -qxF "$loaded" "$work/out"
  check "$preset: the peer loads wam-pipeline's $tensors parameter tensors by name and shape" $? \
    "$(tail -3 "$work/out")"
done

# The same losses and gradients as the C++ model (tests/scripts/peer_reference.cc) from the same
# weights, batch and noise, with the masks as booleans (eager) and as the compiled step's biases.
for preset in tiny small; do
  "$reference" "configs/model/$preset.json" "$work/reference_$preset.safetensors" >"$work/out" 2>&1
  check "$preset: the C++ reference step runs" $? "$(tail -3 "$work/out")"
  "$py" - "$work/reference_$preset.safetensors" "configs/model/$preset.json" <<'PY' ||
import sys
import torch
sys.path.insert(0, "scripts")
import peer_step as ps
path, config = sys.argv[1:3]
preset = config.split("/")[-1][:-len(".json")]
reference = ps.read_safetensors(path)
part = lambda prefix: {k[len(prefix):]: v for k, v in reference.items() if k.startswith(prefix)}
batch, noise = part("batch."), part("noise.")
ok = True
for structure in ("eager", "compiled"):
    model = ps.WorldActionModel(ps.MoTConfig.from_file(config))
    ps.load_training_state(model, path)
    terms = model.loss(batch, noise, compiled_structure=structure == "compiled")
    terms["total"].backward()
    for name in ("total", "video", "action", "future_delta", "semantic"):
        want, got = reference["loss." + name].item(), terms[name].item()
        good = abs(want - got) <= 1e-5 * max(1.0, abs(want)) and (name != "semantic" or want > 0)
        ok &= good
        print(("ok   " if good else "FAIL ") + f"{preset}, {structure}: loss {name} {got:.6f} "
              f"(C++ {want:.6f})")
    grads = part("grad.")
    worst, where = 0.0, ""
    for name, p in model.named_parameters():
        error = ((p.grad - grads[name]).abs().max() / grads[name].abs().max().clamp_min(1e-12))
        if error.item() > worst:
            worst, where = error.item(), name
    good = len(grads) == len(list(model.parameters())) and worst < 1e-4
    ok &= good
    print(("ok   " if good else "FAIL ") + f"{preset}, {structure}: the gradients of all "
          f"{len(grads)} parameters (largest relative difference {worst:.2e}, {where})")
sys.exit(0 if ok else 1)
PY
    failures=$((failures + 1))
done

# A CPU eager step on tiny: the line bench-like scripts parse, finite losses, and training that
# lowers the loss (against the same steps at learning rate 0, where only the noise varies).
tiny=(--model configs/model/tiny.json --device cpu --compile none --batch 2 --steps 10 --warmup 0)
"$py" "$peer" "${tiny[@]}" --lr 1e-2 --json "$work/train.json" >"$work/out" 2>&1
check "tiny: a CPU eager run exits 0" $? "$(tail -3 "$work/out")"
grep -qE '^peer step: [0-9]+\.[0-9]{2} ms per batch, peak n/a \(cpu\), loss [0-9]+\.[0-9]{4}$' \
  "$work/out"
check "tiny: the peer step line" $? "$(cat "$work/out")"
"$py" "$peer" "${tiny[@]}" --lr 0 --json "$work/frozen.json" >/dev/null 2>&1
"$py" "$peer" "${tiny[@]}" --lr 1e-2 --recompute 1 --json "$work/recompute.json" >/dev/null 2>&1
"$py" - "$work/train.json" "$work/frozen.json" "$work/recompute.json" <<'PY' ||
import json, math, sys
train, frozen, recompute = (json.load(open(p)) for p in sys.argv[1:4])
totals = lambda run: [s["total"] for s in run["losses"]]
ok = True
def check(name, good, details):
    global ok
    ok &= good
    print(("ok   " if good else "FAIL ") + name + ("" if good else " " + details))
t, f, r = totals(train), totals(frozen), totals(recompute)
check("tiny: 10 finite losses", len(t) == 10 and all(math.isfinite(x) for x in t), str(t))
check("tiny: training lowers the loss (mean of the last 3 below 0.9 x the first)",
      sum(t[-3:]) / 3 < 0.9 * t[0], str(t))
check("tiny: at learning rate 0 it does not (mean of the last 3 above 0.95 x the first)",
      f[0] == t[0] and sum(f[-3:]) / 3 > 0.95 * f[0], str(f))
check("tiny: recomputing every layer gives the same losses",
      max(abs(a - b) for a, b in zip(t, r)) < 1e-5, f"{t} against {r}")
check("tiny: the JSON's figures", train["parameters"] == 240160 and train["steps"] == 10 and
      train["loss"] == t[-1] and train["peak_gib"] is None, json.dumps(train)[:300])
sys.exit(0 if ok else 1)
PY
  failures=$((failures + 1))

# Per-layer compilation needs torch.compile, which PyTorch 1.13 lacks: a clear refusal.
if ! "$py" -c "import torch; torch.compile" 2>/dev/null; then
  "$py" "$peer" --model configs/model/tiny.json --device cpu >"$work/out" 2>&1
  status=$?
  version=$("$py" -c "import torch; print(torch.__version__)")
  refusal="peer_step: --compile per-layer needs torch.compile (PyTorch >= 2.0); this is PyTorch"
  [ "$status" -eq 2 ] && grep -qxF "$refusal $version: use --compile none" "$work/out"
  check "per-layer compilation without torch.compile is refused" $? \
    "(exit $status: $(cat "$work/out"))"
fi

[ "$failures" -eq 0 ] && echo "all peer_step checks passed" || echo "$failures failed"
exit $((failures > 0))
