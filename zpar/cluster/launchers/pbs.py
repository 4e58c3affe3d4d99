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
    directives = {
        "batch_queue": "#PBS -q {}",
        "batch_account": "#PBS -A {}",
        "batch_walltime": "#PBS -l walltime={}",
    }


ENGINE_SET = PBSEngines
