#!/bin/bash
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
#SBATCH -N 1
#DW jobdw type=scratch access_mode=striped capacity=10GiB
./app

