#!/usr/bin/env bash
# The plugin's dense layers at medium 100,800's shape (bench/device/dense_layers_bench.cu) built several ways and timed in
# one call (seconds; for scripts/device-session.sh's `extra`):
#   DENSE_BASE_SOURCE=.device/DenseLayerKernels-base.cu EXTRA_SCRIPT=bench/device/dense-ab.sh bash scripts/device-session.sh extra
# - "current": platforms/cuda/src/DenseLayerKernels.cu as the pipeline drives it (layer 1's backward scales its output by
#   layer 0's act'(z), DenseBatch::gradScale);
# - "unscaled": the same source, layer 0's backward forming dE/dz itself (-DDENSE_BENCH_NO_GRAD_SCALE);
# - "base", where DENSE_BASE_SOURCE names a copy of an earlier DenseLayerKernels.cu (e.g. one carried in .device): that
#   one, the peer of the same call; built with DENSE_BASE_FLAGS (default -DDENSE_BENCH_NO_GRAD_SCALE, for a source from
#   before gradScale; empty for one that has it).
# - each entry NAME=SED of DENSE_VARIANTS (entries separated by "@@"): the current source edited by `sed -e SED`, for
#   probes that need no change to the plugin's source, e.g.
#   DENSE_VARIANTS='oneblock=s/__launch_bounds__(256, 2)/__launch_bounds__(256, 1)/' (an edit that changes nothing is an
#   error).
# Each binary checks that its two schemes (registers, streamed) agree bitwise; logs in $OUT/dense-ab-*.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/out}"
flags=(-O3 -std=c++17 --fmad=true -gencode arch=compute_90,code=sm_90 -Ibench/device -Iplatforms/cuda/src)
# The variants' sources first, so that a bad entry stops the script before anything is compiled.
variants=()
if [ -n "${DENSE_VARIANTS:-}" ]; then
    while IFS= read -r entry; do
        [ -n "$entry" ] || continue
        name=${entry%%=*} script=${entry#*=}
        [[ "$name" =~ ^[A-Za-z0-9_-]+$ ]] || { echo "DENSE_VARIANTS: \"$entry\" is not NAME=SED (NAME: letters, digits, _ or -)"; exit 1; }
        sed -e "$script" platforms/cuda/src/DenseLayerKernels.cu > "/tmp/DenseLayerKernels-$name.cu"
        if cmp -s platforms/cuda/src/DenseLayerKernels.cu "/tmp/DenseLayerKernels-$name.cu"; then
            echo "DENSE_VARIANTS: $name: the edit \"$script\" changes nothing"
            exit 1
        fi
        variants+=("$name")
    done < <(printf '%s\n' "${DENSE_VARIANTS//@@/$'\n'}")
fi
nvcc "${flags[@]}" -o /tmp/dense_ab_current bench/device/dense_layers_bench.cu platforms/cuda/src/DenseLayerKernels.cu &
nvcc "${flags[@]}" -DDENSE_BENCH_NO_GRAD_SCALE -o /tmp/dense_ab_unscaled bench/device/dense_layers_bench.cu \
    platforms/cuda/src/DenseLayerKernels.cu &
builds=(current unscaled)
if [ -n "${DENSE_BASE_SOURCE:-}" ] && [ -f "$DENSE_BASE_SOURCE" ]; then
    cp "$DENSE_BASE_SOURCE" /tmp/DenseLayerKernelsBase.cu
    nvcc "${flags[@]}" ${DENSE_BASE_FLAGS--DDENSE_BENCH_NO_GRAD_SCALE} -o /tmp/dense_ab_base bench/device/dense_layers_bench.cu \
        /tmp/DenseLayerKernelsBase.cu &
    builds+=(base)
fi
for name in "${variants[@]}"; do
    nvcc "${flags[@]}" -o "/tmp/dense_ab_$name" bench/device/dense_layers_bench.cu "/tmp/DenseLayerKernels-$name.cu" &
    builds+=("$name")
done
wait
# Twice each, interleaved, so that a drift of the clock over the call shows as a difference between the rounds.
for round in 1 2; do
    for b in "${builds[@]}"; do
        echo "== $b (round $round)" | tee -a "$OUT/dense-ab-$b.log"
        timeout 120 /tmp/dense_ab_$b | tee -a "$OUT/dense-ab-$b.log"
    done
done
