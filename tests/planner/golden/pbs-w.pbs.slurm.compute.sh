#!/bin/sh
#PBS -N staged
# scratchkeeper: a data directive, run by a data job of the chain
# scratchkeeper: a data directive, run by a data job of the chain
./run
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
