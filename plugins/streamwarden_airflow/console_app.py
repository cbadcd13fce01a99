"""The job board's web app, mounted in Airflow's api-server at `/streamwarden` (`streamwarden_console`).

Thin: every answer is `ops.console` data as JSON, or the one static page that shows it. Airflow
does not protect a plugin's FastAPI app, so every route here depends on `authenticated`, which
asks Airflow's configured auth manager exactly as Airflow's own REST API does (a bearer token or
the UI's session cookie); with auth on, a request without one is refused with 401. The embedded
platform runs the simple auth manager with every user an admin, whose middleware gives each request
a token, so the board opens without a login there, like the rest of its UI.

A state lookup by key (`/api/jobs/JOB/state?key=K`) needs Spark, which the api-server must not
host: `ops.console.state_lookup` runs it in a `warden state` process with a time limit.

The page triggers restatements through Airflow's own REST API (`POST /api/v2/dags/warden_restate/
dagRuns`) from the browser, so Airflow checks the user's right to trigger that DAG. The New job and
Edit forms do the same: this app only drafts the job file from the form's values and checks it
(`ops.console.drafts`: Spark's analyzer in a process, one check at a time), writing nothing; the
page then triggers `warden_new_job` or `warden_edit_job` with the checked file, and starts a new
job by unpausing its supervision DAG (`PATCH /api/v2/dags/...`), each with the user's own rights.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from ops.clock import utcnow
from ops.console.board import Console, as_json
from ops.console.job_form import (
    DraftRequest,
    FormKind,
    current_values,
    draft_text,
    edit_refusal,
    new_job_values,
)
from ops.exceptions import (
    ConfigError,
    DraftCheckBusyError,
    DraftRejectedError,
    StateLookupBusyError,
    StateLookupError,
    StateLookupTimeoutError,
    StateReadError,
    WardenError,
)
from ops.ledger.store import Ledger
from ops.spec.job import JobSpec
from ops.spec.platform import load_platform

URL_PREFIX = "/streamwarden"
PAGE = Path(__file__).resolve().parent / "console_page.html"


async def authenticated(request: Request) -> None:
    """Refuse a request the auth manager cannot put a user to (401 without credentials)."""
    # Imported per request: Airflow's security module loads its models and API (seconds), and
    # every Airflow process imports the plugins folder, while only the api-server serves requests.
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    await get_user(request, None, await bearer_scheme(request))


@cache
def console() -> Console:
    """The platform's console, opened at the first request (not when Airflow imports plugins)."""
    platform = load_platform()
    return Console(platform, Ledger.open(platform.resolved_ledger_url))


app = FastAPI(title="Streamwarden job board", dependencies=[Depends(authenticated)])


@app.get("/board", response_class=HTMLResponse)
@app.get("/jobs/{job}", response_class=HTMLResponse)
def page() -> str:
    """The board, or a job's page: one static page that reads the API below."""
    return PAGE.read_text()


# The answers are plain JSON values already: a JSONResponse skips FastAPI's per-value encoder,
# which took most of the board's time with 50 jobs.


@app.get("/api/board")
def board() -> JSONResponse:
    return JSONResponse({"generated_at": utcnow().isoformat(), "jobs": as_json(console().board(utcnow()))})


@app.get("/api/jobs/{job}")
def job_page(job: str) -> JSONResponse:
    found = console().job_page(job, utcnow())
    if found is None:
        raise HTTPException(status_code=404, detail=f"no job named {job!r}")
    return JSONResponse({"generated_at": utcnow().isoformat(), **as_json(found)})


@app.get("/api/jobs/{job}/state")
def state_lookup(job: str, key: str = Query(min_length=1)) -> JSONResponse:
    """The rows of `key` in the job's committed state, read by a `warden state` process (a sync
    route: FastAPI runs it in a worker thread, so the seconds it takes block no other request)."""
    try:
        found = console().look_up_state(job, key)
    except StateReadError as error:
        raise HTTPException(status_code=409, detail=str(error)) from error
    except StateLookupBusyError as error:
        raise HTTPException(status_code=503, detail=str(error)) from error
    except StateLookupTimeoutError as error:
        raise HTTPException(status_code=504, detail=str(error)) from error
    except StateLookupError as error:
        raise HTTPException(status_code=502, detail=str(error)) from error
    if found is None:
        raise HTTPException(status_code=404, detail=f"no job named {job!r}")
    if not found.rows:
        raise HTTPException(status_code=404, detail=found.missing_key)
    return JSONResponse(as_json(found))


# The New job and Edit forms. A check answers 200 whatever it found: `problems` maps each field of
# the job file to why (empty: the file is fine), beside the file's `text` the page then triggers
# the DAG with. Only a check that could not run is an error.


@app.get("/api/drafts/new")
def new_job_form(kind: FormKind) -> JSONResponse:
    """The values a New job form starts from."""
    return JSONResponse(new_job_values(kind).model_dump(mode="json"))


@app.post("/api/drafts")
def check_new_job(request: DraftRequest) -> JSONResponse:
    """A new job's file drafted from the form's values, and what is wrong with it."""
    return _checked(request, None)


@app.get("/api/jobs/{job}/draft")
def edit_form(job: str) -> JSONResponse:
    """The Edit form's values: the job's file as it is written."""
    return JSONResponse(current_values(console().platform, _editable(job)).model_dump(mode="json"))


@app.post("/api/jobs/{job}/draft")
def check_edit(job: str, request: DraftRequest) -> JSONResponse:
    """The job's new version drafted from the form's values, and what is wrong with it."""
    return _checked(request, _editable(job).name)


def _editable(job: str) -> JobSpec:
    """The spec of a job the form edits; 404 without its file, 409 when the form cannot edit it."""
    spec = console().specs.spec(job)
    if isinstance(spec, ConfigError) and not spec.path.exists():
        raise HTTPException(status_code=404, detail=f"no job named {job!r}")
    refusal = edit_refusal(spec)
    if isinstance(spec, ConfigError) or refusal is not None:
        raise HTTPException(status_code=409, detail=refusal)
    return spec


def _checked(request: DraftRequest, job: str | None) -> JSONResponse:
    """Draft the file and check it (a sync route: its worker thread waits out the analyzer's
    process, blocking no other request)."""
    try:
        text = draft_text(console().platform, request, job)
    except ConfigError as error:
        raise HTTPException(status_code=409, detail=str(error)) from error
    try:
        console().drafts.check(text, job)
        problems: dict[str, str] = {}
    except DraftRejectedError as rejected:
        problems = rejected.problems
    except DraftCheckBusyError as error:
        raise HTTPException(status_code=503, detail=str(error)) from error
    except WardenError as error:
        raise HTTPException(status_code=502, detail=str(error)) from error
    return JSONResponse({"job": job or request.name, "text": text, "problems": problems})
