"""The shipped example of in-stream model scoring (`conf/examples/purchase_risk.yaml`,
`jobs.purchase_risk`), installed into a test platform with its model versions in the model store.

Three versions of the risk model: the default (`DEFAULT_WEIGHTS`, `DEFAULT_BIAS`), one that moves
every score up (a bias 3 higher: most purchases' scores move by far more than the job's
`max_shift`), and one within it (a bias 0.05 higher).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from jobs.purchase_risk.model import DEFAULT_BIAS, logistic_model
from ops.models import ModelVersion, push_model
from ops.spec.platform import DEFAULT_CONF_DIR, PlatformConfig
from tests.support.drivers import fast_trigger
from tests.support.platform import STUCK_GRACE_FLOORS
from tests.support.ports import free_test_port

JOB = "purchase_risk"
MODEL = "purchase_risk"
SHIFTED_BIAS = DEFAULT_BIAS + 3.0
CLOSE_BIAS = DEFAULT_BIAS + 0.05


def push_risk_model(platform: PlatformConfig, directory: Path, bias: float = DEFAULT_BIAS) -> ModelVersion:
    """A logistic risk model with `bias` written under `directory` and pushed as the next version."""
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / f"risk-{bias:g}.onnx"
    file.write_bytes(logistic_model(bias=bias))
    return push_model(platform, MODEL, file)


def risk_job_spec(model_version: int = 1) -> dict[str, Any]:
    """The example's job file with a test's trigger, graces and metrics port, pinning `model_version`."""
    spec = yaml.safe_load((DEFAULT_CONF_DIR / "examples" / f"{JOB}.yaml").read_text())
    spec["pipeline"]["models"]["risk"]["version"] = model_version
    spec["operations"]["metrics_port"] = free_test_port()
    fast_trigger(spec)
    spec["operations"]["health"].update(STUCK_GRACE_FLOORS)
    return spec


def install_risk_job(platform: PlatformConfig, model_version: int = 1) -> Path:
    """Write the job file into the platform's conf dir; its path."""
    path = platform.conf_dir / "jobs" / f"{JOB}.yaml"
    path.write_text(yaml.safe_dump(risk_job_spec(model_version), sort_keys=False))
    return path
