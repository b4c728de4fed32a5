#!/usr/bin/env bash
# Installs the ascend-llm runtime wheel into a vllm-ascend image WITHOUT changing any package the
# image already has (torch, torch_npu, vllm, vllm-ascend above all).
#
#   install-runtime.sh WHEEL
#
# 1. Records every installed distribution and version (pip list, editables excluded: vllm and
#    vllm-ascend are editable installs in these images) and what `pip check` says already.
# 2. Installs the wheel with --no-deps.
# 3. Installs the runtime's own dependencies, read from the wheel's metadata (pyproject's
#    `dependencies`, no extras), under a constraint file pinning everything recorded in 1: a
#    dependency already satisfied is left alone, a missing one is added, and one that would need
#    a different version of an installed package fails the build instead of replacing it.
# 4. Verifies: torch, torch_npu, vllm and vllm-ascend report the same versions as before, no
#    recorded distribution changed or vanished, and `pip check` reports nothing new.
# PYTHON selects the interpreter (default python3, the image's).
set -euo pipefail

wheel=${1:?usage: install-runtime.sh WHEEL}
PY=${PYTHON:-python3}
pip=("$PY" -m pip --disable-pip-version-check --no-cache-dir --no-input)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

protected_versions() {
  "$PY" - <<'PYEOF'
from importlib.metadata import PackageNotFoundError, version

for name in ("torch", "torch_npu", "vllm", "vllm_ascend"):
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        print(f"{name} (not installed)")
PYEOF
}

"${pip[@]}" list --format=freeze --exclude-editable | sort > "$work/before.txt"
protected_versions > "$work/protected-before.txt"
"${pip[@]}" check > "$work/check-before.txt" 2>&1 || true
echo "install-runtime: protected packages before:" && cat "$work/protected-before.txt"

"${pip[@]}" install --no-deps "$wheel"

# The runtime's requirements, from the installed distribution's metadata (no extras).
"$PY" - > "$work/requirements.txt" <<'PYEOF'
from importlib.metadata import requires

try:
    from packaging.requirements import Requirement
except ImportError:  # packaging is itself a runtime dependency; pip carries a copy
    from pip._vendor.packaging.requirements import Requirement

for line in requires("ascend-llm") or []:
    requirement = Requirement(line)
    # Requirements of extras (operator, test, ...) carry an `extra == "..."` marker: skip them.
    if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
        print(line)
PYEOF
echo "install-runtime: runtime dependencies:" && cat "$work/requirements.txt"
"${pip[@]}" install -c "$work/before.txt" -r "$work/requirements.txt"

protected_versions > "$work/protected-after.txt"
if ! diff -u "$work/protected-before.txt" "$work/protected-after.txt"; then
  echo "install-runtime: the install changed torch/torch_npu/vllm/vllm-ascend (diff above)" >&2
  exit 1
fi
"${pip[@]}" list --format=freeze --exclude-editable | sort > "$work/after.txt"
changed=$(comm -23 "$work/before.txt" "$work/after.txt")
if [[ -n $changed ]]; then
  echo "install-runtime: these installed packages were changed or removed:" >&2
  echo "$changed" >&2
  exit 1
fi
"${pip[@]}" check > "$work/check-after.txt" 2>&1 || true
new_problems=$(comm -13 <(sort "$work/check-before.txt") <(sort "$work/check-after.txt") | grep -v '^No broken requirements found' || true)
if [[ -n $new_problems ]]; then
  echo "install-runtime: pip check reports new problems:" >&2
  echo "$new_problems" >&2
  exit 1
fi
echo "install-runtime: added $(comm -13 "$work/before.txt" "$work/after.txt" | tr '\n' ' ')"
echo "install-runtime: ok, protected packages unchanged"
