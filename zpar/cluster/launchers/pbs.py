"""Engines as one PBS job (OpenPBS / PBS Pro / Torque): ``qsub`` a script whose ``pbsdsh``
starts one engine on each of the N chunks it was given."""

from __future__ import annotations

from zpar.cluster.launchers.batch import BatchEngines

TEMPLATE = """#!/bin/sh
#PBS -N zpar-engines-{cluster_id}
#PBS -l select={n}:ncpus=1
#PBS -j oe
#PBS -o {log_dir}/{cluster_id}-pbs.log
#PBS -V
{options}
pbsdsh -- {engine_command}
"""


class PBSEngines(BatchEngines):
    kind = "pbs"
    system = "PBS"
    submit = ["qsub"]
    cancel = ["qdel"]
    suffix = ".pbs"
    template = TEMPLATE

    def options(self) -> list[str]:
        s = self.ctx.settings
        out = []
        if s.batch_queue:
            out.append(f"#PBS -q {s.batch_queue}")
        if s.batch_account:
            out.append(f"#PBS -A {s.batch_account}")
        if s.batch_walltime:
            out.append(f"#PBS -l walltime={s.batch_walltime}")
        return out


ENGINE_SET = PBSEngines
