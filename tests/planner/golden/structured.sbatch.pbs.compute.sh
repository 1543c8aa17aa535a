#!/bin/bash
#SBATCH --job-name=sim
#SBATCH --nodes=2
#SBATCH --qos=normal
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
srun ./simulate /scratch/alice/run42
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
