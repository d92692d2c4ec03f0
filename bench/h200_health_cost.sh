#!/usr/bin/env bash
# Second H200 call: the cost of each NVML health call and of the backend poll with/without them (idle GPU).
# usage (device run, from a copy of this tree): bash bench/h200_health_cost.sh   -> results under $OUT
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
python3 bench/nvml_call_cost.py --n 300 --json $OUT/h200_nvml_call_cost.json 2>&1 | tee $OUT/log.txt
python3 bench/poll_nvml.py --rounds 11 --polls 100 --json $OUT/h200_poll_nvml_health.json 2>&1 | tee -a $OUT/log.txt
