# shellcheck shell=bash
# The cluster environment of a training job: every NCCL/RCCL, PyTorch and ROCm setting that
# scripts/slurm/train.sbatch gives the tasks, in this one place. train.sbatch sources it in the
# batch shell; srun passes the environment on to every task (its default --export=ALL, pyxis
# containers included).
#
# Every setting is `: "${VAR=default}"`: a variable already set in the environment you submit
# from (or in the batch script before this file) wins, so
#     NCCL_IB_HCA=mlx5_0,mlx5_3 NCCL_NET_GDR_LEVEL=0 sbatch scripts/slurm/train.sbatch ...
# changes two settings and keeps the rest. An empty value means "not set": the variable is
# unset before the tasks start, so the library's own default applies (e.g. NCCL_SOCKET_IFNAME=
# lets NCCL pick the interface). Another file entirely: CLUSTER_ENV=/path/to/site_env.sh.
#
# CLUSTER_PROFILE picks the defaults:
#   b200    NVIDIA B200/H100 nodes, NCCL over InfiniBand or RoCE
#   mi350x  AMD MI350X/MI355X nodes, RCCL (it reads the NCCL_* names) over RoCE NICs
#   cpu     no accelerator: gloo; none of the NCCL settings are exported
#   auto    (default) b200 when nvidia-smi lists a GPU on the first node, mi350x when /dev/kfd
#           exists there, else cpu
#
# Variables (default per profile: b200 / mi350x / cpu; "-" = not set):
#   PG_TIMEOUT_S                     - / - / -   seconds a collective may wait before the job fails; passed to
#                                    the trainer as the binding common.RunConfig.process_group_timeout_s (not
#                                    set: the gin file's value, 1800 s unless it binds one)
#   NCCL_SOCKET_IFNAME               - / - / -   interface(s) for NCCL's bootstrap and socket transport, e.g.
#                                    "ib0" or "=eth0" or "^lo,docker" (site-specific)
#   NCCL_IB_HCA                      - / - / -   RDMA devices NCCL may use, e.g. "mlx5_0,mlx5_1,..." (B200, one
#                                    per GPU) or "bnxt_re0,...", "rdma0,..." (MI350X NICs) (site-specific)
#   NCCL_IB_GID_INDEX                - / - / -   RoCE v2 GID index (often 3) where the NICs run RoCE (site-specific)
#   NCCL_NET_GDR_LEVEL               - / 5 / -   GPUDirect RDMA: how far apart NIC and GPU may be for the NIC to
#                                    read GPU memory directly (0 = off, host staging; 5 = SYS, always). NCCL on
#                                    B200 picks by topology; RCCL needs 5 for GPU<->NIC DMA (the DLRM-HSTU
#                                    upstream's measured +22% at 2 nodes); set 0 where peer memory is missing
#   NCCL_DMABUF_ENABLE               - / 1 / -   GPUDirect RDMA through dma-buf (RCCL over bnxt_re in the upstream)
#   NCCL_IB_TIMEOUT                  22 / 22 / - InfiniBand/RoCE retransmission timeout exponent (4.096 us x 2^N);
#                                    above NCCL's 20 so a congested fabric retries instead of failing
#   NCCL_IB_RETRY_CNT                7 / 7 / -   retransmissions before an IB error
#   NCCL_DEBUG                       WARN / WARN / -   NCCL/RCCL log level (INFO prints the topology and transports)
#   TORCH_NCCL_ASYNC_ERROR_HANDLING  1 / 1 / -   a failed or timed-out collective aborts the communicator and ends
#                                    the process (the job fails instead of hanging until the time limit)
#   TORCH_NCCL_DUMP_ON_TIMEOUT       1 / 1 / -   on a watchdog timeout every rank dumps its flight-recorder trace
#   TORCH_NCCL_TRACE_BUFFER_SIZE     2000 / 2000 / -   collectives kept in the flight recorder (0 = off)
#   TORCH_NCCL_DEBUG_INFO_TEMP_FILE  - / - / -   where the traces go (torch's default /tmp/nccl_trace_rank_<r>);
#                                    point it at a shared filesystem to keep them after the job
#   HSA_FORCE_FINE_GRAIN_PCIE        - / 1 / -   ROCm: fine-grained PCIe memory, for RCCL's NIC and peer transfers
#   HSA_NO_SCRATCH_RECLAIM           - / 1 / -   ROCm: keep kernel scratch memory allocated (avoids reclaim stalls)
#   GLOO_SOCKET_IFNAME               - / - / -   interface for gloo (CPU jobs, and gloo groups on GPU jobs)
#   OMP_NUM_THREADS                  - / - / 1   intra-op CPU threads per rank (cpu: one per rank, so ranks sharing
#                                    a node do not oversubscribe it; common.RunConfig.num_threads overrides)
#
# Nothing here has run on a GPU cluster yet (see the README's "Launching" section): the GPU
# defaults are the settings the upstream DLRM-HSTU launcher used (MI350X) and NCCL's documented
# knobs, to be checked on the first multi-node run.

: "${CLUSTER_PROFILE:=auto}"
if [[ "$CLUSTER_PROFILE" == auto ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    CLUSTER_PROFILE=b200
  elif [[ -e /dev/kfd ]]; then
    CLUSTER_PROFILE=mi350x
  else
    CLUSTER_PROFILE=cpu
  fi
fi

case "$CLUSTER_PROFILE" in
  b200)
    : "${PG_TIMEOUT_S=}"
    : "${NCCL_SOCKET_IFNAME=}"
    : "${NCCL_IB_HCA=}"
    : "${NCCL_IB_GID_INDEX=}"
    : "${NCCL_NET_GDR_LEVEL=}"
    : "${NCCL_DMABUF_ENABLE=}"
    : "${NCCL_IB_TIMEOUT=22}"
    : "${NCCL_IB_RETRY_CNT=7}"
    : "${NCCL_DEBUG=WARN}"
    : "${TORCH_NCCL_ASYNC_ERROR_HANDLING=1}"
    : "${TORCH_NCCL_DUMP_ON_TIMEOUT=1}"
    : "${TORCH_NCCL_TRACE_BUFFER_SIZE=2000}"
    : "${TORCH_NCCL_DEBUG_INFO_TEMP_FILE=}"
    : "${HSA_FORCE_FINE_GRAIN_PCIE=}"
    : "${HSA_NO_SCRATCH_RECLAIM=}"
    : "${GLOO_SOCKET_IFNAME=}"
    : "${OMP_NUM_THREADS=}"
    ;;
  mi350x)
    : "${PG_TIMEOUT_S=}"
    : "${NCCL_SOCKET_IFNAME=}"
    : "${NCCL_IB_HCA=}"
    : "${NCCL_IB_GID_INDEX=}"
    : "${NCCL_NET_GDR_LEVEL=5}"
    : "${NCCL_DMABUF_ENABLE=1}"
    : "${NCCL_IB_TIMEOUT=22}"
    : "${NCCL_IB_RETRY_CNT=7}"
    : "${NCCL_DEBUG=WARN}"
    : "${TORCH_NCCL_ASYNC_ERROR_HANDLING=1}"
    : "${TORCH_NCCL_DUMP_ON_TIMEOUT=1}"
    : "${TORCH_NCCL_TRACE_BUFFER_SIZE=2000}"
    : "${TORCH_NCCL_DEBUG_INFO_TEMP_FILE=}"
    : "${HSA_FORCE_FINE_GRAIN_PCIE=1}"
    : "${HSA_NO_SCRATCH_RECLAIM=1}"
    : "${GLOO_SOCKET_IFNAME=}"
    : "${OMP_NUM_THREADS=}"
    ;;
  cpu)
    : "${PG_TIMEOUT_S=}"
    : "${GLOO_SOCKET_IFNAME=}"
    : "${OMP_NUM_THREADS=1}"
    ;;
  *)
    echo "cluster_env.sh: CLUSTER_PROFILE=$CLUSTER_PROFILE is not one of auto, b200, mi350x, cpu" >&2
    return 2 2>/dev/null || exit 2
    ;;
esac
export CLUSTER_PROFILE

# the variables this file manages: set ones are exported, empty ones unset (the library's default)
CLUSTER_ENV_VARS=(
  NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_NET_GDR_LEVEL NCCL_DMABUF_ENABLE
  NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT NCCL_DEBUG
  TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_NCCL_TRACE_BUFFER_SIZE
  TORCH_NCCL_DEBUG_INFO_TEMP_FILE HSA_FORCE_FINE_GRAIN_PCIE HSA_NO_SCRATCH_RECLAIM
  GLOO_SOCKET_IFNAME OMP_NUM_THREADS
)
for _var in "${CLUSTER_ENV_VARS[@]}"; do
  if [[ -n "${!_var:-}" ]]; then
    export "${_var?}"
  else
    unset "$_var"
  fi
done
unset _var
# PG_TIMEOUT_S is read by train.sbatch (a gin binding), not by the tasks
