"""Rescaling: the autoscaler's or an operator's new scale opened as a `scale` operation, which the
next passes carry out make before break (`ops.control.policy`: a standby at the new scale warms
up and takes over), and its report when it is done, with the measured restart cost."""

from __future__ import annotations

from ops.control.context import Control
from ops.control.policy import JobView, Rescale
from ops.control.scaling import RESCALED, Scale
from ops.control.standbys import retire
from ops.ledger.records import OperationRecord
from ops.states import OperationKind, Step


def open_rescale(control: Control, view: JobView, rescale: Rescale, decision: int) -> str:
    """Set the job's scale (an operator's pin stays) and open the rescale the next passes carry
    out; its decision row gets the outcome when it is closed."""
    job, ledger = view.spec.name, control.ledger
    if not view.job.scale_pinned:
        ledger.update_job(
            job,
            scale_cores=rescale.cores,
            scale_max_files=rescale.max_files_per_trigger,
            scale_low_since=None,
        )
    operation = ledger.start_operation(
        job,
        OperationKind.SCALE,
        rescale.reason,
        decision,
        Step.REQUESTED,
        from_cores=rescale.from_cores,
        to_cores=rescale.cores,
        to_max_files=rescale.max_files_per_trigger,
        true_rate_before=rescale.true_rate_before,
    )
    target = Scale(rescale.cores, rescale.max_files_per_trigger).describe()
    retired = ""
    standby = view.standby.record
    if standby is not None:
        # It runs the old scale: a new one is launched once the job runs at the new one.
        retire(control, standby, "stopped: rescale")
        retired = f"; standby {standby.run_id} retired"
    return f"rescale to {target} opened (operation {operation.id}){retired}"


def rescale_outcome(control: Control, operation: OperationRecord) -> str:
    """A finished rescale's outcome, with its measured restart cost (read again: the pass that
    measured it recorded the cost after the view was taken)."""
    current = control.ledger.operation_by_id(operation.id)
    assert current is not None
    cost = current.restart_cost_seconds
    down = "" if cost is None else f"; down {cost:.1f} s from the stop to the first committed batch"
    target = Scale(current.to_cores, current.to_max_files).describe()
    return f"{RESCALED} from {current.from_cores or 'default'} to {target}{down}"
