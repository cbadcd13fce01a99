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
dagRuns`) from the browser, so Airflow checks the user's right to trigger that DAG.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse

from ops.clock import utcnow
from ops.console.board import Console, as_json
from ops.exceptions import StateLookupBusyError, StateLookupError, StateLookupTimeoutError, StateReadError
from ops.ledger.store import Ledger
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
