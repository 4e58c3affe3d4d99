"""Engines as one batch job: a script from a template, submitted, cancelled on stop.

The template is the profile's ``<kind>_engines.template`` if present (or the file named by
``[batch] template``), else the launcher's built-in one. It is formatted with str.format:
``{n}``, ``{cluster_id}``, ``{engine_command}`` (a shell-quoted ``python -m zpar.engine …``),
``{log_dir}``, ``{options}`` (queue, account and time limit lines from ``[batch]``) and
``{python}``. The script is written to ``<profile>/batch/`` and kept for the user to read.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from zpar.cluster.connection import profile_dir
from zpar.cluster.launchers.base import EngineSet
from zpar.errors import LaunchError

#: Seconds sbatch / qsub / scancel / qdel may take (a busy batch server is slow, not dead).
BATCH_TIMEOUT = 60.0


class BatchEngines(EngineSet):
    system: ClassVar[str]  # "Slurm" / "PBS"
    submit: ClassVar[list[str]]
    cancel: ClassVar[list[str]]
    suffix: ClassVar[str]
    template: ClassVar[str]
    #: the directive line of each [batch] setting, "{}" standing for its value
    directives: ClassVar[dict[str, str]]
    job_id_re: ClassVar[re.Pattern[str]] = re.compile(r"(\d+(?:\.[\w.-]+)?)")

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.job_id = ""
        self.script: Path | None = None

    def options(self) -> list[str]:
        """Directive lines for the [batch] settings that are set."""
        s = self.ctx.settings
        return [
            line.format(getattr(s, name))
            for name, line in self.directives.items()
            if getattr(s, name)
        ]

    def template_text(self) -> str:
        s = self.ctx.settings
        if s.batch_template:
            path = Path(s.batch_template).expanduser()
        else:
            path = profile_dir(self.ctx.profile) / f"{self.kind}_engines.template"
            if not path.exists():
                return self.template
        try:
            return path.read_text()
        except OSError as e:
            raise LaunchError(f"cannot read the {self.system} job template {path}: {e}") from None

    def render(self) -> str:
        engine_command = shlex.join([self.ctx.python, *self.ctx.engine_args()])
        fields = {
            "n": self.n,
            "cluster_id": self.ctx.cluster_id,
            "engine_command": engine_command,
            "log_dir": str(self.ctx.log_dir),
            "options": "\n".join(self.options()),
            "python": self.ctx.python,
        }
        try:
            return self.template_text().format(**fields)
        except (KeyError, IndexError, ValueError) as e:
            raise LaunchError(
                f"the {self.system} job template has a bad field {e}; "
                f"known: {', '.join('{' + k + '}' for k in fields)}"
            ) from None

    def write_script(self) -> Path:
        d = profile_dir(self.ctx.profile) / "batch"
        d.mkdir(exist_ok=True)
        path = d / f"{self.ctx.cluster_id}-engines-{self.index}{self.suffix}"
        path.write_text(self.render())
        return path

    @classmethod
    def _run(cls, cmd: list[str], what: str) -> str:
        exe = shutil.which(cmd[0])
        if exe is None:
            raise LaunchError(
                f"{cmd[0]} not found on PATH: {what} needs {cls.system}'s commands; run it on "
                f"a {cls.system} login node (see docs/deploy.md)"
            )
        try:
            r = subprocess.run(
                [exe, *cmd[1:]], capture_output=True, text=True, timeout=BATCH_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            raise LaunchError(f"{cmd[0]} did not answer within {BATCH_TIMEOUT:g} s") from None
        if r.returncode != 0:
            raise LaunchError(f"{shlex.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()}")
        return r.stdout

    def start(self) -> None:
        self.script = self.write_script()
        out = self._run([*self.submit, str(self.script)], f"--engines {self.kind}")
        m = self.job_id_re.search(out)
        if m is None:
            raise LaunchError(f"{self.submit[0]} printed no job id: {out.strip()!r}")
        self.job_id = m.group(1)

    def record(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "n": self.n,
            "job_id": self.job_id,
            "script": str(self.script or ""),
        }

    @classmethod
    def stop_record(cls, record: dict[str, Any], timeout: float = 5.0) -> int:
        if not record.get("job_id"):
            return 0
        cls._run([*cls.cancel, record["job_id"]], "stopping the engines' job")
        return 1

    def describe(self) -> str:
        return f"\n- {self.system} job {self.job_id} (script {self.script}); see its output in " + (
            f"{self.ctx.log_dir}"
        )
