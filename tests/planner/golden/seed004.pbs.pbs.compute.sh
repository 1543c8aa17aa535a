#!/bin/bash
#PBS -N myjob
#PBS -l nodes=128,walltime=12:00
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
mpirun -np 128 ~/programs/myapp
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
