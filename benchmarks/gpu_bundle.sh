#!/usr/bin/env bash
# Export the GPU bundle: the benchmark cases whose plans are all C++ today, at GPU sizes,
# plus the op sampler (one case of every op the C++ path covers). Run it here (it needs
# dpt_ir and warp-lang); run the result on a GPU machine with benchmarks/gpu_check.py
# (NumPy and CuPy only). See docs/gpu-check.md.
#
#   benchmarks/gpu_bundle.sh OUTDIR [SIDE]      # SIDE: the cases' square side, default 8192 (2^26 elements)
#
# Inputs of the cases are drawn from seeds on the device (plan.json's `seed` entries), so the
# bundle holds code, plans and sampled references only; the script fails if it exceeds 20 MiB.
# Refused today (a launch off the C++ path; export names it): the tape plans of every case
# (the scalar loss's cotangent is broadcast by a view), the value_and_grad plans of
# softmax_xent and normalisation (their backward broadcasts row results), and imaging (the
# blur is a Warp-Python stencil).
set -euo pipefail

OUT=${1:?usage: benchmarks/gpu_bundle.sh OUTDIR [SIDE]}
SIDE=${2:-8192}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
LIMIT=$((20 * 1024 * 1024))

mkdir -p "$OUT"
GRAPHS=$(mktemp -d)
trap 'rm -rf "$GRAPHS"' EXIT

# The graph documents of the cases (benchmarks/cases.py), at SIDE x SIDE (imaging at SIDE / 2).
"$PY" - "$GRAPHS" "$SIDE" <<'EOF'
import sys
from benchmarks.cases import CASES
folder, side = sys.argv[1], int(sys.argv[2])
for name, case in CASES.items():
    shape = (side // 2,) * 2 if name == "imaging" else (side, side)
    with open(f"{folder}/{name}.json", "w", encoding="utf-8") as fh:
        fh.write(case.build(shape).model_dump_json())
EOF

export_case() {  # NAME PLANS [WRT]: no WRT for a forward-only export (one pipeline to compile)
    local name=$1 plans=$2
    echo "== $name ($plans)"
    "$PY" -m dpt_ir export-cuda "$GRAPHS/$name.json" ${3:+--wrt "$3"} --plans "$plans" --seed 7 --out "$OUT/$name"
}

export_case beer run,value_and_grad x
export_case chain16 run,value_and_grad x
export_case softmax_xent run
export_case normalisation run
echo "== imaging (run): expected to be refused today"
if "$PY" -m dpt_ir export-cuda "$GRAPHS/imaging.json" --plans run --seed 7 --out "$OUT/imaging" 2>"$GRAPHS/err"; then
    echo "imaging exported"
else
    echo "refused: $(tail -n 1 "$GRAPHS/err")"
fi
echo "== op sampler"
"$PY" -m tests.export.sampler "$OUT/op_sampler"

SIZE=$(du -sb "$OUT" | cut -f1)
echo "bundle $OUT: $SIZE bytes"
if [ "$SIZE" -gt "$LIMIT" ]; then
    echo "error: $OUT is $SIZE bytes, over the 20 MiB limit" >&2
    exit 1
fi
