"""An engine's MPI rank when mpiexec started it (imported by every engine: standard library
only, and mpi4py only under mpiexec, where initialising MPI is what the user wants)."""

from __future__ import annotations

import os

#: Rank variables of MPICH/Hydra and Intel MPI (PMI_RANK), Open MPI (OMPI_COMM_WORLD_RANK),
#: PMIx launchers (PMIX_RANK) and Slurm's srun (SLURM_PROCID has no MPI meaning alone).
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")


def mpi_rank() -> int:
    """This process's rank in MPI_COMM_WORLD, or -1 when not started by mpiexec."""
    env = next((os.environ[v] for v in RANK_VARIABLES if v in os.environ), None)
    if env is None:
        return -1
    try:
        from mpi4py import MPI  # initialises MPI: engines' code can use mpi4py at once

        return int(MPI.COMM_WORLD.Get_rank())
    except Exception:  # not installed, or built against another MPI: the variable is enough
        try:
            return int(env)
        except ValueError:
            return -1
