"""Engines as one Slurm job of N tasks: ``sbatch`` a script whose ``srun`` starts them."""

from __future__ import annotations

from zpar.cluster.launchers.batch import BatchEngines

TEMPLATE = """#!/bin/sh
#SBATCH --job-name=zpar-engines-{cluster_id}
#SBATCH --ntasks={n}
#SBATCH --output={log_dir}/{cluster_id}-slurm-%j.log
#SBATCH --export=ALL
{options}
srun {engine_command}
"""


class SlurmEngines(BatchEngines):
    kind = "slurm"
    system = "Slurm"
    submit = ["sbatch", "--parsable"]
    cancel = ["scancel"]
    suffix = ".sbatch"
    template = TEMPLATE
    directives = {
        "batch_queue": "#SBATCH --partition={}",
        "batch_account": "#SBATCH --account={}",
        "batch_walltime": "#SBATCH --time={}",
    }


ENGINE_SET = SlurmEngines
