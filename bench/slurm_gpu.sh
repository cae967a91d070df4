#!/bin/bash
# PSGLD on one GPU node of a Slurm cluster: checks the GPU path (pymf info, the GPU tests),
# runs the GPU benchmark against the node's CPU, then a sampling run with --backend cuda.
# Submit with `sbatch bench/slurm_gpu.sh` from the repository root.
#
# Needs: pymf installed (`pip install ".[gpu,test]"`, or CuPy where pycuda cannot be built) in
# a virtualenv on a shared file system. Where the install node had nvcc, the wheel carries
# prebuilt kernels (psgld.fatbin) and the GPU node needs only the driver; otherwise load the
# site's CUDA toolkit so that the kernels can be compiled at first use.
#SBATCH --job-name=pymf-gpu
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=16
#SBATCH --time=00:30:00
#SBATCH --output=pymf-gpu-%j.out

set -euo pipefail
module load cuda 2>/dev/null || true             # the site's toolkit, if it uses modules
source "${PYMF_VENV:-$HOME/pymf/.venv}/bin/activate"

export OMP_NUM_THREADS="${SLURM_CPUS_PER_TASK:-1}"
export OMP_PROC_BIND=close OMP_PLACES=cores
RUN_DIR="${RUN_DIR:-$HOME/pymf-runs/gpu-${SLURM_JOB_ID:-local}}"
mkdir -p "${RUN_DIR}"

pymf info                                        # "cuda": usable through pycuda or cupy
python -m pytest -q -ra tests/test_cuda.py       # the GPU tests run here, not skip
python bench/psgld_gpu.py --repeats 3 | tee "${RUN_DIR}/psgld_gpu.txt"
pymf sample --data demo --rank 32 --sampler psgld --blocks 32 --backend cuda \
     --samples 10000 --thin 100 --out "${RUN_DIR}/sample"
# Results: the benchmark's JSON and table in RUN_DIR/psgld_gpu.txt; pymf.load(RUN_DIR/sample).
