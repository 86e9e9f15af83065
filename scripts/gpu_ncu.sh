#!/usr/bin/env bash
# Hardware counters for one write and one read launch of one shape (default the main one: H=8,
# D=128, T=65536, block_size 16), on the GPU machine:   scripts/gpu_ncu.sh OUTDIR
# Answers "memory- or instruction-bound?": DRAM throughput and bytes against the minimum the
# bench counts, how busy the ALU/FMA pipes and the issue slots were, and (a second pass) how long
# a warp stalled on what. Env: KVQ_NCU_KERNELS (default both), KVQ_NCU_SHAPE, KVQ_NCU_TOKENS.
# Decode attention: KVQ_NCU_KERNELS=attention_kernel profiles one launch of `kvq bench
# --attention` at KVQ_NCU_ATTENTION (default 32 sequences x 32768 tokens, GQA 4, nvfp4).
set -uo pipefail
out=${1:?usage: gpu_ncu.sh OUTDIR}
mkdir -p "$out"
ncu=$(command -v ncu || { [[ -x /usr/local/cuda/bin/ncu ]] && echo /usr/local/cuda/bin/ncu; })
[[ -n $ncu ]] || { echo "gpu_ncu.sh: ncu not found" >&2; exit 127; }
# shellcheck disable=SC2034  # metrics and stalls are read through ${!pass} below
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,\
dram__bytes_read.sum,dram__bytes_write.sum,sm__issue_active.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,\
sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,\
sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct,\
sm__inst_executed.sum,launch__registers_per_thread,launch__grid_size
# shellcheck disable=SC2034
stalls=smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,\
smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_drain.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,\
smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,\
smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,\
smsp__average_warp_latency_issue_stalled_barrier.ratio,\
smsp__average_warp_latency_issue_stalled_not_selected.ratio
for kernel in ${KVQ_NCU_KERNELS:-nvfp4_write_kernel nvfp4_read_kernel}; do
  for pass in metrics stalls; do
    if [[ $kernel == attention* ]]; then
      read -ra what <<< "--attention ${KVQ_NCU_ATTENTION:---seqs 32 --contexts 32768 --gqa 4 \
--formats nvfp4} --iterations 2"
    else
      what=(--shapes "${KVQ_NCU_SHAPE:-8x128}" --tokens "${KVQ_NCU_TOKENS:-65536}" --iterations 5)
    fi
    timeout 120 "$ncu" --clock-control none --kernel-name "regex:$kernel" --launch-skip 3 \
      --launch-count 1 --metrics "${!pass}" \
      build/bin/kvq bench configs/nvfp4_sm100.yaml --backend cuda "${what[@]}" \
      > "$out/ncu_${kernel}_$pass.txt" 2>&1
    echo "ncu $kernel $pass rc=$?"
    grep -E "^\s+(gpu__|dram__|sm__|lts__|smsp__)" "$out/ncu_${kernel}_$pass.txt"
  done
done
