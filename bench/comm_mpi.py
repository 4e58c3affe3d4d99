"""mpi4py side of bench/comm.py: run under mpiexec, prints rank 0's figures as JSON."""

import json
import sys

from mpi4py import MPI

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from comm_kernels import suite  # noqa: E402

res = suite(MPI.COMM_WORLD, quick="--quick" in sys.argv)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps(res))
