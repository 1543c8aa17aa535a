#!/bin/bash
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
#SBATCH --job-name=sim
#SBATCH --nodes=2
#SBATCH --qos=normal
srun ./simulate /scratch/alice/run42

