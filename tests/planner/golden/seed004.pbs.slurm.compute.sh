#!/bin/bash
# scratchkeeper: compute job of chain skgolden0001; its data directives run in data jobs
#PBS -N myjob
#PBS -l nodes=128,walltime=12:00
mpirun -np 128 ~/programs/myapp

