#!/usr/bin/env bash
# Export the GPU bundle: every plan (run, value_and_grad, tape) of the five benchmark cases at
# GPU sizes, of a loop program (heat_scan: 16 heat steps of a dp.scan on a 256^2 field,
# binomial checkpointing with 4 stored carries), plus the op sampler (one case of every op
# the C++ path covers). Run it here (it
# needs dpt_ir and warp-lang); run the result on a GPU machine with benchmarks/gpu_check.py
# (NumPy and CuPy only). See docs/gpu-check.md.
#
#   benchmarks/gpu_bundle.sh OUTDIR [SIDE]      # beer at SIDE x SIDE (default 8192: 2^26 elements),
#                                               # the other cases at SIDE/2 x SIDE/2 (4096^2)
#
# Inputs of the cases are drawn from seeds on the device (plan.json's `seed` entries; imaging's
# uint8 mask too, about 1 % zeros), so the bundle holds code, plans and sampled references
# only; the script fails if it exceeds 20 MiB. The references come from the compiled CPU
# program (--reference program): the interpreter's float64 temporaries of whole arrays need
# far more memory and time at these sizes, and the CPU program equals the interpreter at the
# bundle's tolerances in the CPU tests (tests/export replays small bundles against it).
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

# The graph documents of the cases (benchmarks/cases.py): beer at SIDE x SIDE, the others at
# SIDE / 2; heat_scan (a loop program: docs/gpu-check.md, "Loop programs") at (SIDE / 4)^2, at
# most 256^2: the segment packing the loop's cotangent (embed_slice) reads image tables the
# size of the field, launch constants shipped in ref.npz (the bundle must stay <= 20 MiB).
"$PY" - "$GRAPHS" "$SIDE" <<'EOF'
import sys
import numpy as np
import dpt_ir as dp
from benchmarks.cases import CASES
folder, side = sys.argv[1], int(sys.argv[2])
for name, case in CASES.items():
    shape = (side, side) if name == "beer" else (side // 2,) * 2
    with open(f"{folder}/{name}.json", "w", encoding="utf-8") as fh:
        fh.write(case.build(shape).model_dump_json())
field, steps, laplacian = (min(side // 4, 256),) * 2, 16, np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
g = dp.GraphBuilder("heat_scan")
u0, k, xs = g.input("u0", field), g.input("k", field), g.input("xs", (steps, *field))
def step(u, src):  # explicit heat step with a closed-over conductivity, a source row, an energy y
    u = u + 0.2 * k * dp.correlate(u, laplacian, mode="nearest") + 0.1 * src
    return u, dp.mean(dp.square(u))
u, energy = dp.scan(step, u0, xs, checkpoint=4)
g.output("loss", dp.sum(u * u0) + dp.sum(energy))
g.output("field", u)
with open(f"{folder}/heat_scan.json", "w", encoding="utf-8") as fh:
    fh.write(g.build().model_dump_json())
EOF

export_case() {  # NAME WRT [--range NAME=LO:HI ...]: every plan, references from the CPU program
    local name=$1 wrt=$2
    shift 2
    echo "== $name"
    "$PY" -m dpt_ir export-cuda "$GRAPHS/$name.json" --wrt "$wrt" --seed 7 --reference program "$@" --out "$OUT/$name"
}

export_case beer x
export_case chain16 x
export_case softmax_xent z
export_case normalisation x
export_case imaging mu --range mu=0:1 --range mask=0.99:2
export_case heat_scan u0 --wrt k --loss loss --range u0=-1:1 --range xs=-1:1 --range k=0.5:1
echo "== op sampler"
"$PY" -m tests.export.sampler "$OUT/op_sampler"

SIZE=$(du -sb "$OUT" | cut -f1)
echo "bundle $OUT: $SIZE bytes"
if [ "$SIZE" -gt "$LIMIT" ]; then
    echo "error: $OUT is $SIZE bytes, over the 20 MiB limit" >&2
    exit 1
fi
