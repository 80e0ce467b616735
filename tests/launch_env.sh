#!/bin/sh
# ccl_comm_init_env under each launcher's convention, without cclrun: starts
# N copies of PROG by hand with only that launcher's variables set and
# checks that all of them exit 0.   launch_env.sh STYLE N PROG ARGS...
# STYLE: torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), slurm
# (SLURM_PROCID, SLURM_NTASKS + MASTER_*), ompi (OMPI_COMM_WORLD_RANK/SIZE +
# CCL_ROOT_ADDR), pmi (PMI_RANK/PMI_SIZE + CCL_ROOT_ADDR).
set -u
style=$1 n=$2; shift 2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for v in $(env | sed -n 's/^\(CCL_[A-Z_]*\|RANK\|WORLD_SIZE\|MASTER_[A-Z]*\|SLURM_[A-Z_]*\|OMPI_COMM_WORLD_[A-Z]*\|PMI_[A-Z]*\)=.*/\1/p'); do
  unset "$v"
done
export CCL_TIMEOUT=60
pids=""
r=0
while [ $r -lt "$n" ]; do
  case $style in
    torchrun) RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$@" >/dev/null & ;;
    slurm) SLURM_PROCID=$r SLURM_NTASKS=$n MASTER_ADDR=localhost MASTER_PORT=$port "$@" >/dev/null & ;;
    ompi) OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$n CCL_ROOT_ADDR=127.0.0.1:$port "$@" >/dev/null & ;;
    pmi) PMI_RANK=$r PMI_SIZE=$n CCL_ROOT_ADDR=127.0.0.1:$port "$@" >/dev/null & ;;
    *) echo "unknown style $style" >&2; exit 2 ;;
  esac
  pids="$pids $!"
  r=$((r + 1))
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
[ $rc -eq 0 ] && echo "$style: $n ranks exited 0" || echo "$style: a rank failed" >&2
exit $rc
