#!/usr/bin/env bash
# scripts/joint-split-bench.py --check-cpu: the joint attention split by its rows' visible keys
# (each group's rows over a prefix of the keys, the key and value gradients summed) against
# torch.autograd through the whole masked attention, in float64 on the CPU. Runs Debian's PyTorch
# 1.13 (/usr/bin/python3, python3-torch from scripts/setup.sh), or the PATH's python3 where that
# has none. Usage: joint_split_test.sh (from the source root)
set -uo pipefail
py=/usr/bin/python3
"$py" -c "import torch" 2>/dev/null || py=python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "FAIL neither /usr/bin/python3 nor python3 has torch (scripts/setup.sh: python3-torch)"
  exit 1
fi
exec "$py" scripts/joint-split-bench.py --check-cpu
