#!/usr/bin/env bash
# One call on nvidia-h200-x2: NVLink capture, 2-rank NCCL logs (P2P and P2P disabled), probe vs plain torch.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
R=/tmp/x2; rm -rf $R; mkdir -p $R/nvml $R/nccl $R/probe $R/state
LOG=$R/log.txt
step() { echo "=== $* ($(date +%T))" | tee -a $LOG; }
step info
{ nvidia-smi; nvidia-smi topo -m; python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.device_count(), torch.cuda.nccl.version())'; } >>$LOG 2>&1
step nvml
python3 -m amdtop.telemetry.nvml_replay record --out $R/nvml/h200x2_replay.json --polls 3 >>$LOG 2>&1
python3 -m amdtop snapshot --json --backend nvml > $R/nvml/h200x2_snapshot.json 2>>$LOG
python3 -m amdtop topo --backend nvml > $R/nvml/h200x2_topo.txt 2>>$LOG; cat $R/nvml/h200x2_topo.txt >>$LOG
step nccl
for spec in "0,1:h200x2-2rank:" "0,1:h200x2-2rank-p2pdisable:NCCL_P2P_DISABLE=1"; do
  IFS=: read -r devs tag extra <<<"$spec"
  env NCCL_DEBUG=INFO $extra timeout 120 python3 bench/nccl_allreduce.py --devices $devs --logdir $R/nccl --tag $tag > $R/nccl/$tag.stdout.log 2>&1
  echo "$tag rc=$?" | tee -a $LOG; tail -3 $R/nccl/$tag.stdout.log >>$LOG
done
python3 -m amdtop logs parse $R/nccl/*.log >>$LOG 2>&1
step probe
for i in 1 2; do
  timeout 200 python3 -m amdtop probe --backend nvml --gpus 0-1 --json --state-dir $R/state > $R/probe/amdtop_probe_x2_$i.json 2>>$LOG; echo "amdtop probe rc=$?" >>$LOG
  timeout 200 python3 bench/probe_reference.py --gpus 0,1 --json $R/probe/reference_x2_$i.json --compare $R/probe/amdtop_probe_x2_$i.json 2>&1 | tee -a $LOG
done
python3 -m amdtop probe --backend nvml --gpus 0-1 --state-dir $R/state >>$LOG 2>&1
step done
cd /tmp && tar czf $OUT/x2.tar.gz x2 && cp $R/log.txt $OUT/log.txt
