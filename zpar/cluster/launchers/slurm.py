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

    def options(self) -> list[str]:
        s = self.ctx.settings
        out = []
        if s.batch_queue:
            out.append(f"#SBATCH --partition={s.batch_queue}")
        if s.batch_account:
            out.append(f"#SBATCH --account={s.batch_account}")
        if s.batch_walltime:
            out.append(f"#SBATCH --time={s.batch_walltime}")
        return out


ENGINE_SET = SlurmEngines
