#!/bin/sh
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
#PBS -N staged
./run

