#!/bin/bash
#SBATCH -N 1
#DW jobdw type=scratch access_mode=striped capacity=10GiB
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
./app
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
